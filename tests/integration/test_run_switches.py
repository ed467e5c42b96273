# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run switches typed as -e key=value reach the playbooks as the booleans they say.

-e key=value always passes a string, and a non-empty string is truthy in Jinja: a consumer
that read 'false' without the bool filter would act as if true. This runs the playbooks' own
variable files through ansible-playbook with each switch typed both ways and reads what the
playbooks decide from them (the preflight's acceptance of the same words is in
test_site_preflight.py; the roll refusal's switch is exercised there through rolling_upgrade.yml).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
PLAY = """
- name: Read what the playbooks decide from the switches
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files:
    - %(repo)s/playbooks/vars/lock.yml
    - %(repo)s/playbooks/vars/settled.yml
  tasks:
    - name: Write the decisions
      ansible.builtin.copy:
        content: "{{ {'break_lock': __sglang_pd_lock_break, 'compare_settled': __sglang_pd_settled_enabled} | to_json }}"
        dest: "%(out)s"
        mode: '0644'
"""


def decisions(tmp_path, typed):
    playbook = tmp_path / 'switches.yml'
    out = tmp_path / 'decisions.json'
    playbook.write_text(PLAY % {'repo': REPO, 'out': out})
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), str(playbook), '-i', 'localhost,',
                           '-e', 'ansible_python_interpreter=' + sys.executable]
                          + [arg for pair in typed.items() for arg in ('-e', '%s=%s' % pair)],
                          capture_output=True, text=True, check=True, cwd=str(tmp_path),
                          env=dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
                                   ANSIBLE_LOCALHOST_WARNING='false', ANSIBLE_STDOUT_CALLBACK='ansible.builtin.default'))
    assert 'ok=1' in done.stdout, done.stdout
    return json.loads(out.read_text())


@pytest.mark.parametrize('word, value', [('true', True), ('yes', True), ('1', True), ('false', False), ('no', False), ('0', False)])
def test_a_typed_switch_decides_as_it_says(tmp_path, word, value):
    found = decisions(tmp_path, {'sglang_pd_break_lock': word, 'sglang_pd_skip_settled': word})
    assert found == {'break_lock': value, 'compare_settled': value}, found
