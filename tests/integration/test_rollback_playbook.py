# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""playbooks/rollback.yml as an operator runs it: the listing, the refusals before anything moves, the choice.

Three nodes on this machine (local connection) keep their image history in a temporary folder (the role's
history path, moved there with -e); a fixture Docker engine (fake_docker) holds the newest image only.
"""

from __future__ import annotations

import json
import os
import sys

import fake_docker
import pytest
from playbook_runner import REPO, run_playbook

pytest.importorskip('ansible_runner')

REPOSITORY = 'registry.local:5000/mindverse/sglang'
OLD = 'sha256:' + 'a' * 64
NEW = 'sha256:' + 'b' * 64
HOSTS = ('node-0', 'node-1', 'node-2')
LIST = 'List the digests each node ran healthy, newest first'
CHOOSE = 'Move every node to it'


@pytest.fixture(name='rollback')
def fixture_rollback(tmp_path):
    """A function running rollback.yml with the given -e switches: (rc, stdout, the results of LIST and CHOOSE by host)."""
    for host in HOSTS:
        (tmp_path / f'{host}.json').write_text(json.dumps([OLD, NEW]))
    engine = fake_docker.serve(tmp_path / 'docker.sock', {}, images=[
        {'Id': 'sha256:' + 'e' * 64, 'RepoTags': [], 'RepoDigests': [f'{REPOSITORY}@{NEW}']}])
    node = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable}
    inventory = {'all': {'vars': {'sglang_pd_image_repository': REPOSITORY, 'sglang_pd_image_digest': NEW,
                                  'sglang_pd_model_path': '/models/glm'},
                         'children': {'sglang_pd': {'children': {
                             'sglang_prefill': {'hosts': {HOSTS[0]: node}},
                             'sglang_decode': {'hosts': {HOSTS[1]: node}},
                             'sglang_router': {'hosts': {HOSTS[2]: node}}}}}}}
    (tmp_path / 'hosts.json').write_text(json.dumps(inventory))
    runs = []

    def run(**switches):
        private = tmp_path / f'runner-{len(runs)}'
        private.mkdir()
        extravars = dict(switches, __sglang_image_history_file=f'{tmp_path}/{{{{ inventory_hostname }}}}.json',
                         __sglang_image_history_file_before=str(tmp_path / 'none.json'))
        runner = run_playbook(private, os.path.join(REPO, 'playbooks', 'rollback.yml'), str(tmp_path / 'hosts.json'),
                              extravars, project_dir=REPO, env={'DOCKER_HOST': f"unix://{tmp_path / 'docker.sock'}"})
        runs.append(runner)
        results = {task: {e['event_data']['host']: e['event_data']['res'] for e in runner.events
                          if e['event'] == 'runner_on_ok' and e['event_data'].get('task') == task}
                   for task in (LIST, CHOOSE)}
        return runner.rc, runner.stdout.read(), results

    yield run
    engine.shutdown()


def test_without_a_target_it_lists_each_node_newest_first_and_moves_nothing(rollback):
    rc, stdout, results = rollback()
    assert rc == 0, stdout
    assert [result['msg'] for result in results[LIST].values()] == [
        [f'{host}: {NEW} (held), {OLD} (removed)' for host in HOSTS]], stdout
    assert results[CHOOSE] == {}


@pytest.mark.parametrize('switches, words', [
    ({'sglang_pd_rollback_to': 'previous'}, [f'{OLD} no longer held on node-0, node-1, node-2', 'sglang_pd_rollback_pull=true']),
    ({'sglang_pd_rollback_to': 'sha256:' + 'd' * 64}, ['never ran healthy']),
    ({'sglang_pd_rollback_to': 'previous', 'sglang_pd_rollback_pull': 'maybe'}, ['-e sglang_pd_rollback_pull=true']),
])
def test_a_rollback_that_cannot_be_made_is_refused_before_anything_moves(rollback, switches, words):
    rc, stdout, results = rollback(**switches)
    assert rc != 0 and all(word in ' '.join(stdout.split()) for word in words), stdout
    assert results[CHOOSE] == {}
    assert 'Validate the inventory' not in stdout.split('Nothing moved')[-1]


def test_previous_that_may_be_pulled_moves_every_node_to_it_through_the_rolling_upgrade(rollback):
    rc, stdout, results = rollback(sglang_pd_rollback_to='previous', sglang_pd_rollback_pull='true')
    assert {host: result['ansible_facts']['sglang_pd_image_digest'] for host, result in results[CHOOSE].items()} == {
        host: OLD for host in HOSTS}, stdout
    # The rolling upgrade takes over. Its preflight sees the history this run published as a fact of
    # this run, not as an unknown variable of the inventory: it passes the variables check and stops
    # at the addresses (these nodes' names resolve nowhere).
    assert 'PLAY [Validate the inventory' in stdout and rc != 0, stdout
    assert 'SGLPD-PRE-003' not in stdout and 'reads this variable' not in stdout, stdout
    assert 'SGLPD-PRE-010' in stdout, stdout
