"""image_pull against the real Docker engine and the local registry with login (set-up's).

The engine of this machine holds the test images (set-up pushed them). The tampered image's
digest reference is removed first, so that the module pulls it again through the registry;
the registry refuses a wrong password before it looks for a manifest, so a refused pull and an
unknown digest show that the credentials went with the request. Nothing is written to the
Docker configuration file.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from ansible_collections.mindverse.sglang_pd.plugins.modules import image_pull
from module_runner import run_module

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
GENERATED = os.path.join(REPO, 'inventories', 'local', 'group_vars', 'all', 'generated.yml')
DOCKER_CONFIG = os.path.expanduser('~/.docker/config.json')


def _fleet():
    if not os.path.exists(GENERATED):
        return None
    with open(GENERATED, encoding='utf-8') as handle:
        return yaml.safe_load(handle)


FLEET = _fleet()
pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(FLEET is None, reason='the registry and test images are made by scripts/setup (make setup)')]


def _password():
    with open(os.path.join(os.path.dirname(FLEET['fleet_registry_ca_file']), 'password'), encoding='utf-8') as handle:
        return handle.read().strip()


def _config():
    if not os.path.exists(DOCKER_CONFIG):
        return None
    with open(DOCKER_CONFIG, encoding='utf-8') as handle:
        return handle.read()


def _pull(name, password):
    return run_module(image_pull, {'name': name, 'username': FLEET['sglang_pd_registry_username'], 'password': password})


def test_a_removed_digest_is_pulled_again_through_the_registry():
    name = FLEET['sglang_pd_image_repository'] + '@' + FLEET['fleet_image_digest_tampered']
    before = _config()
    subprocess.run(['docker', 'image', 'rm', name], capture_output=True, check=False)
    assert subprocess.run(['docker', 'image', 'inspect', name], capture_output=True, check=False).returncode != 0

    pulled = _pull(name, _password())
    again = _pull(name, _password())

    assert pulled['changed'] is True and name in pulled['image']['repo_digests'], pulled
    assert again['changed'] is False and again['image']['id'] == pulled['image']['id']
    assert _config() == before
    pinned = subprocess.run(['docker', 'image', 'inspect', '--format', '{{.Id}}',
                             FLEET['sglang_pd_image_repository'] + '@' + FLEET['sglang_pd_image_digest']],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert pinned in again['others'] and again['image']['id'] not in again['others'], again['others']


@pytest.mark.parametrize('password, reason', [
    ('not-the-password-4711', 'unauthorized'),
    (None, 'unknown'),
], ids=['refused-credentials', 'unknown-digest'])
def test_a_failed_pull_names_the_registry_reason_without_the_password(password, reason):
    name = FLEET['sglang_pd_image_repository'] + '@sha256:' + '0' * 63 + '1'
    sent = password or _password()
    before = _config()

    result = _pull(name, sent)

    assert result['failed'] is True
    assert result['msg'].startswith('Pulling %s failed: ' % name) and reason in result['msg'].lower(), result['msg']
    assert sent not in result['msg'] and result['retryable'] is False
    assert _config() == before
