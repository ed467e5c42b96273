# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""image_pull: pulls only what is missing, credentials in the request only, errors without secrets.

The Docker API is a fake that records the calls the docker SDK would make; the real daemon and
registry are used by tests/integration/test_image_pull_engine.py and the molecule scenarios.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from ansible.module_utils import basic
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _image_artifacts
from ansible_collections.mindverse.sglang_pd.plugins.modules import image_pull
from module_runner import run_module

REPO = '172.30.57.1:5443/mindverse/sglang'
DIGEST = 'sha256:' + 'ab' * 32
REF = REPO + '@' + DIGEST
SECRET = 's3cr3t-token'


class FakeAPI:
    """The calls of docker.APIClient the module makes, with a registry behind them."""

    def __init__(self, present=False, events=None, digests=None, data_root='/'):
        self.present = present
        self.others = []  # IDs of the repository's other images
        self.listed = []
        self.data_root = data_root
        self.events = events if events is not None else [
            {'status': 'Pulling from mindverse/sglang', 'id': DIGEST},
            {'status': 'Already exists', 'id': 'aaa'},
            {'status': 'Pull complete', 'id': 'bbb'},
            {'status': 'Pull complete', 'id': 'ccc'},
            {'status': 'Digest: ' + DIGEST},
        ]
        self.digests = digests if digests is not None else [REF]
        self.pulls = []

    def info(self):
        return {'DockerRootDir': self.data_root}

    def inspect_image(self, name):
        if not self.present:
            raise image_pull.NotFound('No such image: %s' % name)
        return {'Id': 'sha256:' + 'cd' * 32, 'RepoDigests': self.digests, 'Size': 1234}

    def images(self, name=None, quiet=False):
        self.listed.append((name, quiet, list(self.pulls)))
        return ([('sha256:' + 'cd' * 32)] if self.present else []) + self.others

    def pull(self, repository, tag=None, stream=False, decode=False, auth_config=None):
        self.pulls.append({'repository': repository, 'tag': tag, 'stream': stream, 'decode': decode, 'auth_config': auth_config})
        for event in self.events:
            yield event
            if 'error' in event:
                return
        self.present = True


@pytest.fixture
def api(monkeypatch):
    fake = FakeAPI()

    class Client:  # pylint: disable=too-few-public-methods
        def __init__(self, *args, **kwargs):
            self.api = fake

    monkeypatch.setattr(_image_artifacts.docker, 'from_env', Client)
    monkeypatch.setattr(_image_artifacts.docker, 'DockerClient', Client)
    return fake


@pytest.mark.parametrize('name, expected', [
    (REF, (REPO, DIGEST)),
    ('registry:5000/a/b:v2', ('registry:5000/a/b', 'v2')),
    ('registry:5000/a/b', ('registry:5000/a/b', 'latest')),
    ('busybox', ('busybox', 'latest')),
])
def test_split_reference(name, expected):
    assert image_pull.split_reference(name) == expected


def test_a_missing_image_is_pulled_by_digest_with_the_credentials_in_the_request(api):
    result = run_module(image_pull, {'name': REF, 'username': 'sglang', 'password': SECRET})
    assert result['changed'] is True
    assert api.pulls == [{'repository': REPO, 'tag': DIGEST, 'stream': True, 'decode': True,
                          'auth_config': {'username': 'sglang', 'password': SECRET}}]
    assert result['layers'] == {'downloaded': 2, 'present': 1}
    assert result['image'] == {'id': 'sha256:' + 'cd' * 32, 'repo_digests': [REF], 'size': 1234}
    assert SECRET not in repr(result)


def test_a_present_image_is_not_pulled(api):
    api.present = True
    result = run_module(image_pull, {'name': REF, 'username': 'sglang', 'password': SECRET})
    assert result['changed'] is False and api.pulls == []
    assert result['image']['repo_digests'] == [REF]


def test_without_a_user_the_daemon_uses_its_own_configuration(api):
    run_module(image_pull, {'name': REF})
    assert api.pulls[0]['auth_config'] is None


def test_check_mode_reports_the_pull_and_pulls_nothing(api):
    result = run_module(image_pull, {'name': REF, 'username': 'sglang', 'password': SECRET}, check_mode=True)
    assert result['changed'] is True and result['image'] == {} and api.pulls == []


def test_the_free_space_at_the_data_root_is_measured_before_the_pull(api, tmp_path, monkeypatch):
    api.data_root = str(tmp_path)
    measured = []

    def statvfs(path):
        measured.append((path, list(api.pulls)))
        return SimpleNamespace(f_bavail=1000, f_frsize=4096)

    monkeypatch.setattr(image_pull.os, 'statvfs', statvfs)
    looked = run_module(image_pull, {'name': REF}, check_mode=True)
    assert (looked['data_root'], looked['free_bytes']) == (str(tmp_path), 4096000)
    pulled = run_module(image_pull, {'name': REF})
    assert pulled['changed'] is True and pulled['free_bytes'] == 4096000
    assert measured == [(str(tmp_path), []), (str(tmp_path), [])], 'measured before the pull started'
    api.present = True
    assert run_module(image_pull, {'name': REF})['free_bytes'] == 4096000


def test_the_repository_s_other_images_are_listed_before_the_pull(api):
    old = 'sha256:' + '01' * 32
    assert run_module(image_pull, {'name': REF}, check_mode=True)['others'] == []
    api.others = [old, old]  # an image listed twice (two tags)
    pulled = run_module(image_pull, {'name': REF})
    assert pulled['changed'] is True and pulled['others'] == [old]
    assert api.listed[-1] == (REPO, True, []), 'listed by repository, before the pull'
    present = run_module(image_pull, {'name': REF}, check_mode=True)
    assert present['changed'] is False and present['others'] == [old], 'the image held for the name is not an other'


def test_a_data_root_that_is_not_here_has_no_free_space_figure(api, tmp_path):
    api.data_root = str(tmp_path / 'on-another-machine')
    result = run_module(image_pull, {'name': REF}, check_mode=True)
    assert result['data_root'] == api.data_root and result['free_bytes'] is None


def test_a_refused_pull_fails_with_the_registry_reason_and_no_secret(api):
    api.events = [{'errorDetail': {'message': 'unauthorized'}, 'error': 'unauthorized: authentication required for ' + SECRET}]
    result = run_module(image_pull, {'name': REF, 'username': 'sglang', 'password': SECRET})
    assert result['failed'] is True
    assert result['msg'].startswith('Pulling %s failed: unauthorized: authentication required' % REF)
    assert SECRET not in result['msg']
    assert result['retryable'] is False


@pytest.mark.parametrize('error, expected', [
    ('unauthorized: authentication required', False),
    ('denied: requested access to the resource is denied', False),
    ('manifest unknown: manifest unknown', False),
    ('Get "https://registry:5443/v2/": dial tcp 172.30.57.1:5443: connect: connection refused', True),
    ('read tcp: i/o timeout', True),
    ('failed to register layer: Error processing tar file(exit status 1): write /opt/venv/x.so: no space left on device', False),
])
def test_only_a_pull_that_may_succeed_later_is_retryable(api, error, expected):
    api.events = [{'error': error}]
    result = run_module(image_pull, {'name': REF})
    assert result['failed'] is True and result['retryable'] is expected


def test_a_pull_that_fills_the_data_root_names_it_and_the_space_it_had(api, tmp_path):
    api.data_root = str(tmp_path)
    api.events = [{'error': 'write /var/lib/docker/tmp/GetImageBlob1: no space left on device'}]
    result = run_module(image_pull, {'name': REF})
    assert result['failed'] is True and result['retryable'] is False
    assert result['msg'].startswith('Pulling %s failed: write /var/lib/docker/tmp/GetImageBlob1: no space left on device. ' % REF)
    assert re.search(r"Docker's data-root %s ran out of space \(\d+ bytes free before the pull\)" % re.escape(str(tmp_path)), result['msg'])


def test_an_image_without_the_pinned_digest_fails(api):
    api.digests = [REPO + '@sha256:' + 'ef' * 32]
    result = run_module(image_pull, {'name': REF})
    assert result['failed'] is True and 'not %s' % REF in result['msg']


def test_a_password_needs_a_user(api):
    result = run_module(image_pull, {'name': REF, 'password': SECRET})
    assert result['failed'] is True and 'username' in result['msg']
    assert api.pulls == []


def test_a_data_root_below_the_threshold_warns_in_check_mode_and_when_the_image_is_there(api, tmp_path, monkeypatch):
    api.data_root = str(tmp_path)
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    monkeypatch.setattr(image_pull.os, 'statvfs', lambda path: SimpleNamespace(f_bavail=20480, f_frsize=4096))
    args = {'name': REF, 'warn_below_bytes': 121474836480, 'warn_setting': 'sglang_image_free_warn_bytes'}
    looked = run_module(image_pull, args, check_mode=True)
    api.present = True
    held = run_module(image_pull, args)
    assert looked['low_space'] is True and held['low_space'] is True and held['changed'] is False and api.pulls == []
    assert len(warnings) == 2 and warnings[0].startswith("Docker's data-root %s has 80.0 MiB free" % tmp_path), warnings
    assert 'sglang_image_free_warn_bytes' in warnings[0]
    warnings.clear()
    assert run_module(image_pull, dict(args, warn_below_bytes=80 * 1024 ** 2))['low_space'] is False and warnings == []
