# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An execution environment built for the released collection gets what it needs.

ansible-builder reads a collection's meta/execution-environment.yml when it builds an EE
(AWX, Ansible Automation Platform). This builds the release tarball, installs it into an
empty collections folder and asks ansible-builder what an EE of it must install: the pinned
Python libraries of requirements.txt and the SSH client the plays reach the nodes with.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
BIN = os.path.dirname(sys.executable)


def _pins(path):
    lines = (line.split('#', 1)[0].strip() for line in open(path, encoding='utf-8'))
    return {line for line in lines if line and not line.startswith('-')}


@pytest.fixture(scope='module')
def introspected(tmp_path_factory):
    work = tmp_path_factory.mktemp('ee')
    subprocess.run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path', str(work), REPO],
                   check=True, capture_output=True)
    version = yaml.safe_load(open(os.path.join(REPO, 'galaxy.yml'), encoding='utf-8'))['version']
    tarball = work / ('mindverse-sglang_pd-%s.tar.gz' % version)
    subprocess.run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--force', '--no-deps',
                    '-p', str(work / 'collections'), str(tarball)], check=True, capture_output=True, cwd=str(work))
    done = subprocess.run([os.path.join(BIN, 'ansible-builder'), 'introspect', str(work / 'collections')],
                          check=True, capture_output=True, text=True)
    return yaml.safe_load(done.stdout.split('---', 1)[1])


def test_the_ee_installs_the_pinned_controller_requirements(introspected):
    found = {line.split('#', 1)[0].strip() for line in introspected['python']}
    # ansible-builder leaves ansible and ansible-core to the EE's own base.
    wanted = {pin for pin in _pins(os.path.join(REPO, 'requirements.txt')) if not pin.startswith('ansible==')}
    assert wanted and found == wanted, (found, wanted)


def test_the_ee_installs_the_ssh_client(introspected):
    system = {line.split('#', 1)[0].strip() for line in introspected['system']}
    assert 'openssh-client [platform:dpkg]' in system and 'openssh-clients [platform:rpm]' in system, system
