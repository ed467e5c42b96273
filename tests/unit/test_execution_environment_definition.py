"""execution-environment.yml pins Ansible and ansible-runner as requirements.txt does.

ansible-builder installs ansible and ansible-runner from the definition's own fields, not from
the collection's requirements; the two places must name the same releases.
"""

from __future__ import annotations

import os

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def _requirement_pins():
    with open(os.path.join(REPO, 'requirements.txt'), encoding='utf-8') as handle:
        lines = (line.split('#', 1)[0].strip() for line in handle)
        return {line.split('==')[0]: line for line in lines if '==' in line}


def test_the_ee_pins_ansible_and_ansible_runner_as_requirements_txt_does():
    with open(os.path.join(REPO, 'execution-environment.yml'), encoding='utf-8') as handle:
        dependencies = yaml.safe_load(handle)['dependencies']
    pins = _requirement_pins()
    assert dependencies['ansible_core']['package_pip'] == pins['ansible']
    assert dependencies['ansible_runner']['package_pip'] == pins['ansible-runner']


def test_the_ee_installs_the_release_and_fetches_nothing_from_galaxy():
    with open(os.path.join(REPO, 'execution-environment.yml'), encoding='utf-8') as handle:
        definition = yaml.safe_load(handle)
    assert definition['version'] == 3
    assert [c['type'] for c in definition['dependencies']['galaxy']['collections']] == ['file']
    assert definition['build_arg_defaults']['ANSIBLE_GALAXY_CLI_COLLECTION_OPTS'] == '--no-deps'
