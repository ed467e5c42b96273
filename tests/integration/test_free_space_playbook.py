# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Free space at Docker's data-root and the model directory: warned in every run, refused when a pull does not fit,
reported by status.yml.

The real playbooks run through ansible-runner against hosts on this machine (local connections). Docker is
fake_docker.py, whose data-root is a folder of the test's temporary folder; the model directory is another. The
free space there cannot be made small, so the thresholds are made larger than it instead: on node-low they are
2**60 bytes (every place is "nearly full"), on node-ok 1 byte (never). The nodes are in sglang_pd_settled, as in a
site.yml run with nothing to converge.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

import fake_docker
import fake_systemctl
import pytest
import yaml
from playbook_runner import REPO, environment, run_playbook

pytest.importorskip('ansible_runner')

REPOSITORY = 'registry.example.com/mindverse/sglang'
DIGEST = 'sha256:' + '5e' * 32
HUGE = 2 ** 60
FREE_SPACE_PLAY = "Measure the free space at Docker's data-root and the model directory"


def _local_address():
    """This machine's outward address: the workers' service address, where nothing listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(('198.51.100.1', 9))
        except OSError:
            pytest.skip('no outward IPv4 address on this machine')
        return probe.getsockname()[0]


@pytest.fixture(name='fleet')
def fixture_fleet(tmp_path):
    """(the inventory path, the data-root, the model directories by host, the environment) with fake_docker serving."""
    data_root = tmp_path / 'docker'
    data_root.mkdir()
    (tmp_path / 'sysfs').mkdir()
    (tmp_path / 'etc').mkdir()
    bin_dir = tmp_path / 'bin'
    fake_systemctl.install(bin_dir, tmp_path / 'systemctl.log')
    daemon = fake_docker.serve(tmp_path / 'docker.sock', {'DockerRootDir': str(data_root), 'ServerVersion': '27.5.1'},
                               containers=[])
    local = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable}
    models = {'node-low': tmp_path / 'models-low' / 'glm', 'node-ok': tmp_path / 'models-ok' / 'glm'}
    hosts = {
        # The model directory is not made: it is measured at its nearest existing parent.
        'node-low': dict(local, sglang_model_dir=str(models['node-low']), sglang_image_free_warn_bytes=HUGE,
                         sglang_model_free_warn_bytes=HUGE),
        'node-ok': dict(local, sglang_model_dir=str(models['node-ok']), sglang_image_free_warn_bytes=1,
                        sglang_model_free_warn_bytes=1),
    }
    inventory = {'all': {
        'vars': {'sglang_pd_image_repository': REPOSITORY, 'sglang_pd_image_digest': DIGEST,
                 'sglang_pd_model_path': '/models/glm', 'sglang_pd_service_address': _local_address(),
                 'sglang_pd_cluster_cidr': '0.0.0.0/0', 'sglang_pd_client_cidrs': ['0.0.0.0/0'],
                 'sglang_service_config_dir': str(tmp_path / 'etc'), 'sglang_pd_sysfs_root': str(tmp_path / 'sysfs'),
                 'sglang_pd_validate_gpu_layout': False, 'sglang_router_api_key': 'router-key-4f9c2a7be1d84c6a'},
        'children': {
            'sglang_pd': {'children': {
                'sglang_prefill': {'hosts': {'node-low': hosts['node-low']}},
                'sglang_decode': {'hosts': {'node-ok': hosts['node-ok']}},
                'sglang_router': {'hosts': {'node-ok': None}}}},
            'sglang_pd_settled': {'hosts': {'node-low': None, 'node-ok': None}}}}}
    path = tmp_path / 'hosts.yml'
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    env = {'DOCKER_HOST': f"unix://{tmp_path / 'docker.sock'}",
           'PATH': f"{bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    yield str(path), str(data_root), {host: str(folder) for host, folder in models.items()}, env
    daemon.shutdown()


def _run(tmp_path, name, playbook, fleet, extravars=None):
    private = tmp_path / ('runner-' + name)
    private.mkdir()
    runner = run_playbook(private, playbook, fleet[0], extravars, project_dir=REPO, env=fleet[3])
    return runner, runner.stdout.read()


def _warnings(stdout):
    """The [WARNING] lines of a run."""
    return [line[len('[WARNING]: '):] for line in stdout.splitlines() if line.startswith('[WARNING]: ')]


def test_a_run_that_pulls_nothing_warns_for_each_place_below_its_threshold(tmp_path, fleet):
    runner, stdout = _run(tmp_path, 'stage', os.path.join(REPO, 'playbooks', 'stages', 'free_space.yml'), fleet)
    assert runner.rc == 0, stdout
    warnings = _warnings(stdout)
    data_root = [w for w in warnings if w.startswith("node-low: Docker's data-root %s has " % fleet[1])]
    model = [w for w in warnings if w.startswith('node-low: the model directory %s has ' % fleet[2]['node-low'])]
    assert len(data_root) == 1 and 'sglang_image_free_warn_bytes' in data_root[0], warnings
    assert len(model) == 1 and 'sglang_model_free_warn_bytes' in model[0], warnings
    assert not [w for w in warnings if 'node-ok' in w], warnings
    # Nothing was pulled or made: the look ran in check mode, the model directory is still missing.
    assert not os.path.exists(fleet[2]['node-low']) and os.listdir(fleet[1]) == []


def test_a_run_that_would_pull_an_image_that_does_not_fit_is_refused_before_anything_restarts(tmp_path, fleet):
    prefetch = {'name': 'mindverse.sglang_pd.sglang_image', 'tasks_from': 'prefetch'}
    play = [{'name': 'Start the pull as site.yml does', 'hosts': 'node-ok', 'gather_facts': False,
             'tasks': [{'name': 'Prefetch', 'ansible.builtin.include_role': prefetch}]}]
    playbook = tmp_path / 'prefetch.yml'
    playbook.write_text(yaml.safe_dump(play))
    runner, stdout = _run(tmp_path, 'pull', str(playbook), fleet, {'sglang_image_size_bytes': HUGE})
    assert runner.rc != 0, stdout
    assert 'pulling %s@%s needs' % (REPOSITORY, DIGEST) in ' '.join(stdout.split()) and '[SGLPD-IMG-007]' in stdout, stdout
    assert 'Start the pull in the background' not in stdout


def test_status_reports_the_free_space_of_each_node_and_a_nearly_full_one_as_drift(tmp_path, fleet):
    status_dir = tmp_path / 'status'
    runner, stdout = _run(tmp_path, 'status', os.path.join(REPO, 'playbooks', 'status.yml'), fleet,
                          {'status_dir': str(status_dir)})
    assert runner.rc == 0, stdout
    report = json.loads((status_dir / 'fleet.json').read_text())
    places = {node['host']: {place['place']: place for place in node['free_space']} for node in report['nodes']}
    assert sorted(places['node-low']) == ['data-root', 'model directory'], places
    low = places['node-low']['data-root']
    assert low['path'] == fleet[1] and low['low'] is True and low['warn_below_bytes'] == HUGE
    stats = os.statvfs(fleet[1])
    assert low['free_bytes'] == pytest.approx(stats.f_bavail * stats.f_frsize, rel=0.05)
    assert places['node-low']['model directory']['path'] == fleet[2]['node-low']
    assert [place['low'] for place in places['node-ok'].values()] == [False, False]
    drift = [(item['kind'], item['host'], item['reason'].split(' has ')[0]) for item in report['drift']
             if item['kind'] == 'low_free_space']
    assert drift == [('low_free_space', 'node-low', 'node-low: the data-root %s' % fleet[1]),
                     ('low_free_space', 'node-low', 'node-low: the model directory %s' % fleet[2]['node-low'])]
    assert report['counts']['low_free_space'] == 2
    # The summary the run prints (YAML, wrapped): the drift line of the nearly full data-root.
    assert 'drift low_free_space: node-low: the data-root %s has ' % fleet[1] in ' '.join(stdout.split())


@pytest.mark.parametrize('playbook', ['playbooks/site.yml', 'playbooks/scale_out.yml', 'playbooks/scale_in.yml',
                                      'playbooks/rolling_upgrade.yml', 'playbooks/rollback.yml'])
def test_every_playbook_that_touches_a_node_measures_the_free_space_of_each(tmp_path, fleet, playbook):
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, playbook),
                           '-i', fleet[0], '--list-hosts'], capture_output=True, text=True, cwd=REPO, check=False,
                          env=dict(os.environ, **environment()))
    assert done.returncode == 0, done.stdout + done.stderr
    plays = re.findall(r'^  play #\d+ \((.*)\): (.*?)\tTAGS: .*\n    pattern: .*\n    hosts \((\d+)\):', done.stdout, re.M)
    # Both nodes, though the inventory holds them in sglang_pd_settled.
    assert [int(count) for _pattern, name, count in plays if name == FREE_SPACE_PLAY] == [2], plays
