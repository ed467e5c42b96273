# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The image history a host keeps for rollbacks, read as the sglang_image role reads it.

The role's own tasks/read_history.yml and vars/main.yml run under Ansible against files in a temporary
folder: the history under the state folder wins; a host that last ran an earlier release has it
only under the old folder, and it is read from there; a host with neither has none.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from playbook_runner import REPO, run_play

pytest.importorskip('ansible_runner')

ROLE = os.path.join(REPO, 'roles', 'sglang_image')


CASES = {
    # host: (history under the state folder, history under the old folder, what the role reads)
    'both': (['sha256:' + 'b' * 64], ['sha256:' + 'a' * 64], ['sha256:' + 'b' * 64]),
    'earlier_release': (None, ['sha256:' + 'a' * 64, 'sha256:' + 'c' * 64], ['sha256:' + 'a' * 64, 'sha256:' + 'c' * 64]),
    'no_history': (None, None, []),
}


@pytest.fixture(scope='module')
def read(tmp_path_factory):
    """What the role reads on each host of CASES (one Ansible run, a local host per case)."""
    tmp_path = tmp_path_factory.mktemp('history')
    hosts = {}
    for host, (now, before, _expected) in CASES.items():
        paths = {'history_now': str(tmp_path / host / 'lib' / 'image-history.json'),
                 'history_before': str(tmp_path / host / 'old' / 'image-history.json')}
        for name, content in (('history_now', now), ('history_before', before)):
            if content is not None:
                os.makedirs(os.path.dirname(paths[name]), exist_ok=True)
                with open(paths[name], 'w', encoding='utf-8') as handle:
                    json.dump(content, handle)
        hosts[host] = dict(paths, ansible_connection='local', ansible_python_interpreter=sys.executable)
    play = {
        'name': 'Read the image history as the role reads it',
        'hosts': 'all',
        'gather_facts': False,
        'tasks': [
            {'name': 'Load the role vars', 'ansible.builtin.include_vars': {'file': os.path.join(ROLE, 'vars', 'main.yml')}},
            # set_fact outranks the role vars just loaded: each host's files are in the temporary folder.
            {'name': 'Point at the files of this case', 'ansible.builtin.set_fact': {
                '__sglang_image_history_file': '{{ history_now }}',
                '__sglang_image_history_file_before': '{{ history_before }}'}},
            {'name': 'Read', 'ansible.builtin.include_tasks': {'file': os.path.join(ROLE, 'tasks', 'read_history.yml')}},
            {'name': 'Report', 'ansible.builtin.set_stats': {
                'data': {'{{ inventory_hostname }}': '{{ __sglang_image_history_read }}'}, 'per_host': False}},
        ],
    }
    return run_play(tmp_path, play, {'all': {'hosts': hosts}})


@pytest.mark.parametrize('host', sorted(CASES))
def test_the_role_reads_the_history_a_host_kept(read, host):
    assert read[host] == CASES[host][2]
