# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/fabric_check.yml measures every planned NIC pair and stops on a failing one.

No RDMA exists here: four inventory hosts (two prefill, two decode) run on this machine over
the local connection, on 127.0.0.1-4, each reading its own fixture sysfs tree (eight MI300X,
eight NDR NICs, tests/unit/sysfs_fixtures.py), and tests/fabric/ib_write_bw stands in for
perftest's binary: a real TCP server and client printing perftest's real output format,
with the bandwidth each NIC pair reports set by the test.

The workers name GPU subsets so that every NIC pair has its own NIC names: p0 GPUs 0,1
(mlx5_ib0, mlx5_ib1), p1 GPUs 2,3; d0 GPUs 0,1, d1 GPUs 4,5. Rank r of a prefill worker pairs
with rank r of a decode worker: 8 NIC pairs, in 2 rounds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
import yaml

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
_SPEC = importlib.util.spec_from_file_location('sysfs_fixtures', os.path.join(REPO, 'tests', 'unit', 'sysfs_fixtures.py'))
sysfs_fixtures = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sysfs_fixtures)
VENV_BIN = os.path.dirname(sys.executable)
STANDIN = os.path.join(REPO, 'tests', 'fabric', 'ib_write_bw')
DIGEST = 'sha256:' + '5e' * 32
HOSTS = {  # host: (mode, service address, GPUs of its worker)
    'p0': ('prefill', '127.0.0.1', [0, 1]),
    'p1': ('prefill', '127.0.0.2', [2, 3]),
    'd0': ('decode', '127.0.0.3', [0, 1]),
    'd1': ('decode', '127.0.0.4', [4, 5]),
}
PAIRS = {  # the expected NIC pairs: (prefill, NIC, decode, NIC)
    ('p0', 'mlx5_ib0', 'd0', 'mlx5_ib0'), ('p0', 'mlx5_ib1', 'd0', 'mlx5_ib1'),
    ('p0', 'mlx5_ib0', 'd1', 'mlx5_ib4'), ('p0', 'mlx5_ib1', 'd1', 'mlx5_ib5'),
    ('p1', 'mlx5_ib2', 'd0', 'mlx5_ib0'), ('p1', 'mlx5_ib3', 'd0', 'mlx5_ib1'),
    ('p1', 'mlx5_ib2', 'd1', 'mlx5_ib4'), ('p1', 'mlx5_ib3', 'd1', 'mlx5_ib5'),
}


def inventory(tmp_path, port):
    hosts = {'sglang_prefill': {}, 'sglang_decode': {}}
    for name, (mode, address, gpus) in HOSTS.items():
        root = tmp_path / ('sysfs-' + name)
        if not root.exists():
            sysfs_fixtures.topology_node(str(root))
        hosts['sglang_' + mode][name] = {
            'ansible_connection': 'local', 'ansible_become': False,
            'ansible_python_interpreter': sys.executable,
            'sglang_pd_service_address': address,
            'sglang_pd_sysfs_root': str(root),
            'sglang_pd_%s_workers' % mode: [{'gpus': gpus}],
        }
    return {'all': {
        'vars': {
            'sglang_pd_image_repository': 'registry.example.com/mindverse/sglang',
            'sglang_pd_image_digest': DIGEST,
            'sglang_pd_model_path': '/models/glm-5.2-fp8',
            'sglang_pd_cluster_cidr': '127.0.0.0/8',
            'sglang_pd_client_cidrs': ['127.0.0.0/8'],
            'sglang_router_api_key': 'router-key-4c1e9b',
            'sglang_pd_validate_gpu_layout': False,
            'sglang_pd_fabric_install': False,
            'sglang_pd_fabric_ib_write_bw': STANDIN,
            'sglang_pd_fabric_port': port,
            'sglang_pd_fabric_timeout': 4,
            'sglang_pd_fabric_args': ['-s', '1048576', '-D', '5'],
            'sglang_pd_fabric_report_dir': str(tmp_path / 'report'),
        },
        'children': {'sglang_pd': {'children': {
            'sglang_router': {'hosts': {'d0': None}},
            'sglang_prefill': {'hosts': hosts['sglang_prefill']},
            'sglang_decode': {'hosts': hosts['sglang_decode']},
        }}},
    }}


def run(tmp_path, standin_config, port, cmdline=None):
    private = tmp_path / ('runner-%d' % len(list(tmp_path.glob('runner-*'))))
    private.mkdir()
    hosts = tmp_path / 'hosts.yml'
    hosts.write_text(yaml.safe_dump(inventory(tmp_path, port), sort_keys=False))
    config = tmp_path / 'standin.json'
    config.write_text(json.dumps(standin_config))
    runner = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=REPO,
        playbook=os.path.join(REPO, 'playbooks', 'fabric_check.yml'),
        inventory=str(hosts),
        # The preflight rightly refuses loopback service addresses; these four hosts are one
        # machine, so the run starts as if an earlier import had passed it.
        extravars={'__sglang_pd_preflight_passed': True},
        cmdline=cmdline,
        envvars={
            'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
            'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
            'ANSIBLE_LOCALHOST_WARNING': 'false',
            'ANSIBLE_NOCOLOR': 'true',
            'IB_WRITE_BW_STANDIN_CONFIG': str(config),
            'PATH': VENV_BIN + os.pathsep + os.environ.get('PATH', ''),
        },
        quiet=True,
    )
    return runner, runner.stdout.read(), list(runner.events)


def report(tmp_path):
    with open(tmp_path / 'report' / 'fabric-check.json', encoding='utf-8') as handle:
        data = json.load(handle)
    return data, (tmp_path / 'report' / 'fabric-check.md').read_text()


def measured_pairs(data):
    return {(p['prefill_host'], p['prefill_nic'], p['decode_host'], p['decode_nic']): p for p in data['pairs']}


def failure_message(events):
    failed = [e for e in events if e['event'] == 'runner_on_failed']
    assert len(failed) == 1, [e['event_data'].get('task') for e in failed]
    assert failed[0]['event_data']['task'] == 'Assert every NIC pair reached its threshold'
    msg = failed[0]['event_data']['res'].get('msg')
    return '\n'.join(msg) if isinstance(msg, list) else str(msg)


def changed_tasks(events):
    return sorted({e['event_data']['task'] for e in events
                   if e['event'] == 'runner_on_ok' and e['event_data']['res'].get('changed')})


def test_every_pair_passes_and_the_matrix_lists_it(tmp_path):
    runner, stdout, events = run(tmp_path, {'gbps': 381.5}, 26100)
    assert runner.rc == 0, stdout
    data, markdown = report(tmp_path)
    pairs = measured_pairs(data)
    assert set(pairs) == PAIRS
    assert data['summary'] == {'pairs': 8, 'passed': 8, 'slow': 0, 'error': 0}
    for pair in pairs.values():
        assert pair['status'] == 'pass' and pair['measured_gbps'] == 381.5 and pair['expected_gbps'] == 320.0, pair
    # No NIC is in two tests of one round; every test has a port of its own.
    for number in {p['round'] for p in pairs.values()}:
        ends = [(p['prefill_host'], p['prefill_nic']) for p in pairs.values() if p['round'] == number]
        ends += [(p['decode_host'], p['decode_nic']) for p in pairs.values() if p['round'] == number]
        assert len(ends) == len(set(ends)), number
    assert len({p['port'] for p in pairs.values()}) == 8
    assert data['nodes']['p1']['d1'] == {'pairs': 2, 'passed': 2, 'min_gbps': 381.5, 'status': 'pass'}
    assert '| p0 | pass 2/2, min 381.50 Gb/s | pass 2/2, min 381.50 Gb/s |' in markdown
    assert '| p1 | mlx5_ib3 | 3 | d1 | mlx5_ib5 | 5 | 381.50 | 320.00 | 400.00 | pass |' in markdown
    # Only the report was written: the measurements change nothing.
    assert changed_tasks(events) == ['Create the report directory on the controller', 'Write the report as JSON',
                                     'Write the report as Markdown']


def test_a_slow_pair_and_a_silent_server_fail_naming_the_pair(tmp_path):
    config = {'gbps': 390.0, 'pairs': {'mlx5_ib3>mlx5_ib1': 120.25}, 'hang_servers': ['mlx5_ib5']}
    runner, stdout, events = run(tmp_path, config, 26200)
    assert runner.rc != 0, stdout
    message = failure_message(events)
    assert ('p1 mlx5_ib3 (GPU 3) -> d0 mlx5_ib1 (GPU 1): measured 120.25 Gb/s, expected at least 320.00 Gb/s '
            '(80% of the 400 Gb/s port rate)') in message
    assert 'ibstat mlx5_ib3 on p1, ibstat mlx5_ib1 on d1' not in message
    assert 'ibstat mlx5_ib3 on p1, ibstat mlx5_ib1 on d0' in message
    # Both clients of d1's mlx5_ib5 wait on a server that never answers: stopped after 4 s.
    for prefill, nic, gpu in (('p0', 'mlx5_ib1', 1), ('p1', 'mlx5_ib3', 3)):
        assert ('%s %s (GPU %d) -> d1 mlx5_ib5 (GPU 5): ib_write_bw measured nothing (rc 124): no result within 4 s '
                '(sglang_pd_fabric_timeout)' % (prefill, nic, gpu)) in message
    assert 'reaches 127.0.0.4 on TCP port' in message
    data, markdown = report(tmp_path)
    assert data['summary'] == {'pairs': 8, 'passed': 5, 'slow': 1, 'error': 2}
    assert data['nodes']['p1']['d0']['status'] == 'fail'
    assert '| p1 | mlx5_ib3 | 3 | d0 | mlx5_ib1 | 1 | 120.25 | 320.00 | 400.00 | **SLOW** |' in markdown
    assert '| p0 | mlx5_ib1 | 1 | d1 | mlx5_ib5 | 5 |  | 320.00 | 400.00 | **NOT MEASURED** |' in markdown


def test_check_mode_measures_nothing_and_site_yml_skips_it_by_default(tmp_path):
    runner, stdout, events = run(tmp_path, {'gbps': 100.0}, 26300, cmdline='--check')
    assert runner.rc == 0, stdout
    assert not (tmp_path / 'report').exists()
    # Not every runner event carries event_data (a line Ansible printed outside a callback does not).
    assert not [e for e in events if e.get('event_data', {}).get('task', '').startswith('Run the ib_write_bw clients')]
    shown = [e['event_data']['res']['msg'] for e in events if e['event'] == 'runner_on_ok'
             and e['event_data'].get('task') == 'Show the tests this run would make (check mode)']
    assert len(shown) == 1 and len(shown[0]) == 8, stdout
    assert ('p0:mlx5_ib0->d0:mlx5_ib0: round 0, on d0: {0} -d mlx5_ib0 -i 1 -p 26300 --report_gbits -F -s 1048576 -D 5; '
            'on p0: {0} -d mlx5_ib0 -i 1 -p 26300 --report_gbits -F -s 1048576 -D 5 127.0.0.3'.format(STANDIN)) in shown[0]
    # Imported by site.yml (which names itself) with sglang_pd_fabric_check at its default: no host is read.
    runner, stdout, events = run(tmp_path, {'gbps': 100.0}, 26400, cmdline='-e sglang_pd_fabric_check_playbook=site.yml')
    assert runner.rc == 0, stdout
    read = "Read the host's devices, groups, GPUs and RDMA devices"
    assert not [e for e in events if e['event'] == 'runner_on_ok' and e['event_data'].get('task') == read]
    assert 'Skip the fabric check' in stdout
