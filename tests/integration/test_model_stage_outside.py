# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which nodes outside a scale-out's --limit the model staging checks for a copy to serve.

The real task file (roles/sglang_model/tasks/stage.yml) runs in check mode through
ansible-runner against local-connection hosts, each with its own model directory written by
model_fixtures: the new node n0 lacks the model, d0..d2 run outside the run. Each check is a
round trip to that node, so only as many are checked as serve every missing node in one wave
(sglang_model_peer_concurrency each); the others only when too few of those hold a copy.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest
import yaml

from model_fixtures import make_model_dir, manifest_of, truncate

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
OUTSIDE = ['d0', 'd1', 'd2']
FIRST = 'Check the first nodes outside this run that could serve a copy'
REST = 'Check the other nodes outside this run when too few of the first hold a verified copy'


def run_stage(tmp_path, broken=(), peer_concurrency=2, new=('n0',)):
    """Run stage.yml for the NEW hosts in check mode; (runner, its output)."""
    files = make_model_dir(str(tmp_path / 'model-source'))
    manifest = tmp_path / 'model.manifest'
    manifest.write_text(manifest_of(files))
    hosts = {}
    for index, name in enumerate(OUTSIDE + list(new)):
        model_dir = tmp_path / ('model-' + name)
        if name in OUTSIDE:
            shutil.copytree(tmp_path / 'model-source', model_dir)
        if name in broken:
            truncate(str(model_dir / sorted(f for f in files if f.endswith('.safetensors'))[0]), 100)
        hosts[name] = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable,
                       'sglang_model_dir': str(model_dir), 'sglang_pd_service_address': '10.0.0.%d' % (10 + index),
                       '__sglang_model_ok': name in OUTSIDE}
    inventory = {'all': {
        'vars': {'sglang_pd_cluster_cidr': '10.0.0.0/24', 'sglang_pd_model_path': '/models/glm',
                 'sglang_pd_model_manifest': str(manifest), 'sglang_pd_model_stage': True,
                 'sglang_model_peer_concurrency': peer_concurrency,
                 'sglang_model_hash_cache': str(tmp_path / 'cache.json')},
        'children': {'sglang_pd': {'children': {'sglang_decode': {'hosts': hosts}}}}}}
    (tmp_path / 'hosts.yml').write_text(yaml.safe_dump(inventory))
    playbook = tmp_path / 'stage.yml'
    playbook.write_text(yaml.safe_dump([{
        'name': 'Stage the model on the new nodes', 'hosts': 'sglang_decode', 'gather_facts': False,
        'tasks': [{'name': 'Run the staging of the model role', 'block': [
            {'name': 'Stage', 'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_model', 'tasks_from': 'stage.yml'}}],
            # Check mode copies nothing, so the waves after the plan may fail: the plan is what is read.
            'rescue': [{'name': 'Read past the copy', 'ansible.builtin.debug': {'msg': 'check mode copies nothing'}}]}],
    }]))
    (tmp_path / 'runner').mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / 'runner'), playbook=str(playbook), inventory=str(tmp_path / 'hosts.yml'),
        limit=','.join(new), cmdline='--check',
        envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                 'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
                 'ANSIBLE_NOCOLOR': 'true',
                 'PATH': os.path.dirname(sys.executable) + os.pathsep + os.environ.get('PATH', '')},
        quiet=True)
    return runner, runner.stdout.read()


def stage(tmp_path, **args):
    """Run stage.yml; (the hosts each check task ran on, the plan)."""
    runner, stdout = run_stage(tmp_path, **args)
    assert runner.rc == 0, stdout
    checked = {FIRST: [], REST: []}
    plan = None
    for event in runner.events:
        data = event.get('event_data', {})
        if event['event'] == 'runner_item_on_ok' and data.get('task') in checked:
            checked[data['task']].append(data['res']['item'])
        if event['event'] == 'runner_on_ok' and data.get('task') == 'Plan the copies (first from the source, then from nodes that hold a copy)':
            plan = data['res']['ansible_facts']['__sglang_model_plan']
    assert plan is not None, stdout
    return checked, plan


def test_one_new_node_checks_one_outside_node(tmp_path):
    checked, plan = stage(tmp_path)
    assert checked == {FIRST: ['d0'], REST: []}
    assert plan == [[{'host': 'n0', 'source': 'peer', 'peer': 'd0'}]]


def test_the_others_are_checked_when_the_first_holds_no_verified_copy(tmp_path):
    checked, plan = stage(tmp_path, broken=('d0',))
    assert checked == {FIRST: ['d0'], REST: ['d1', 'd2']}
    assert plan == [[{'host': 'n0', 'source': 'peer', 'peer': 'd1'}]]


def test_as_many_are_checked_as_serve_every_new_node_in_one_wave(tmp_path):
    checked, plan = stage(tmp_path, peer_concurrency=1, new=('n0', 'n1'))
    assert checked == {FIRST: ['d0', 'd1'], REST: []}
    assert plan == [[{'host': 'n0', 'source': 'peer', 'peer': 'd0'}, {'host': 'n1', 'source': 'peer', 'peer': 'd1'}]]


def test_a_peer_concurrency_below_one_is_refused_by_the_plan(tmp_path):
    runner, stdout = run_stage(tmp_path, peer_concurrency=0)
    assert runner.rc == 0, stdout  # the rescue reads past it
    failed = [e['event_data']['res']['msg'] for e in runner.events if e['event'] == 'runner_on_failed']
    assert len(failed) == 1 and 'peer_concurrency' in failed[0] and 'division' not in failed[0], stdout
