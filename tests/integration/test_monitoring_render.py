# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sglang_monitoring role's files, rendered by Ansible for the example and local inventories,
checked by promtool (Debian's prometheus, installed by scripts/setup/test_tools.sh).

The render (tasks_from: render) touches no host. For each inventory the test runs
`promtool check config` on prometheus.yml (which checks the rules file it names too),
`promtool check rules` on the rules, and `promtool test rules` with series that make each PD
alert fire (and not fire), so the rules are tested against the plan's worker URLs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
VENV_BIN = os.path.dirname(sys.executable)
PLAYBOOK = """
- name: Render the monitoring files
  hosts: "{{ render_hosts }}"
  gather_facts: false
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Render this host's Prometheus files
      ansible.builtin.include_role:
        name: mindverse.sglang_pd.sglang_monitoring
        tasks_from: render
"""
# inventory: (the host Prometheus is rendered for, its service address, the router's host and address,
# prefill worker URLs, decode worker URLs)
SHAPES = {
    'local': ('sglang_monitoring', 'pd-prefill-0', '172.30.57.11', 'pd-decode-0', '172.30.57.12',
              ['http://172.30.57.11:30100'],
              ['http://172.30.57.12:30200', 'http://172.30.57.13:30200', 'http://172.30.57.13:30201']),
    'example-1p3d': ('sglang_router', 'pd-node-1', '10.0.0.11', 'pd-node-1', '10.0.0.11',
                     ['http://10.0.0.10:30100'],
                     ['http://10.0.0.11:30200', 'http://10.0.0.12:30200', 'http://10.0.0.13:30200']),
    'example-2p2d': ('sglang_router', 'pd-node-0', '10.0.0.10', 'pd-node-0', '10.0.0.10',
                     ['http://10.0.0.10:30100', 'http://10.0.0.11:30100'],
                     ['http://10.0.0.12:30200', 'http://10.0.0.13:30200']),
}


def promtool():
    path = shutil.which('promtool')
    assert path, ('promtool is not installed on the controller: scripts/setup/test_tools.sh installs it '
                  "(Debian's prometheus package: apt-get install --no-install-recommends prometheus)")
    return path


def run_promtool(*args, cwd=None):
    result = subprocess.run([promtool()] + list(args), capture_output=True, text=True, check=False, cwd=cwd)
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def render(tmp_path, inventory, hosts, metrics):
    out = tmp_path / 'render'
    private = tmp_path / 'runner'
    private.mkdir()
    playbook = tmp_path / 'render_monitoring.yml'
    playbook.write_text(PLAYBOOK, encoding='utf-8')
    extravars = {'render_hosts': hosts, 'sglang_monitoring_render_dir': str(out),
                 'sglang_monitoring_amd_exporter_targets': ['10.0.0.10:5000']}
    # Extra vars win over the inventory (the local fleet enables worker metrics): both ways, explicitly.
    extravars['sglang_worker_options'] = {'enable_metrics': metrics}
    runner = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=REPO,
        playbook=str(playbook),
        inventory=os.path.join(REPO, 'inventories', inventory),
        extravars=extravars,
        envvars={
            'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
            'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
            'SGLANG_ROUTER_API_KEY': 'router-key-unused',
            'ANSIBLE_NOCOLOR': 'true',
            'PATH': VENV_BIN + os.pathsep + os.environ.get('PATH', ''),
        },
        quiet=True,
    )
    stdout = runner.stdout.read()
    assert runner.rc == 0, f"the render of inventories/{inventory} failed:\n{stdout}"
    return out


@pytest.fixture(scope='module', params=[(name, metrics) for name in sorted(SHAPES) for metrics in (False, True)],
                ids=lambda param: f"{param[0]}-{'metrics' if param[1] else 'no-metrics'}")
def rendered(request, tmp_path_factory):
    inventory, metrics = request.param
    shape = SHAPES[inventory]
    out = render(tmp_path_factory.mktemp(inventory), inventory, shape[0], metrics)
    host_dir = out / shape[1]
    assert host_dir.is_dir(), f"nothing rendered for {shape[1]} in {out}: {os.listdir(out)}"
    return inventory, metrics, shape, host_dir


def test_promtool_accepts_config_and_rules(rendered):
    inventory, _metrics, _shape, host_dir = rendered
    rules = host_dir / 'sglang_pd.rules.yml'
    output = run_promtool('check', 'config', str(host_dir / 'prometheus.yml'))
    assert str(rules) in output, f"{inventory}: prometheus.yml does not name the rendered rules file:\n{output}"
    run_promtool('check', 'rules', str(rules))


def test_targets_follow_the_plan(rendered):
    inventory, metrics, shape, host_dir = rendered
    _group, _host, _address, router_host, router_address, prefills, decodes = shape
    with open(host_dir / 'prometheus.yml', encoding='utf-8') as handle:
        config = yaml.safe_load(handle)
    jobs = dict((job['job_name'], [t for s in job['static_configs'] for t in s['targets']]) for job in config['scrape_configs'])
    assert jobs['sglang_router'] == [f'{router_address}:29000'], f"{inventory}: router targets {jobs['sglang_router']}"
    workers = [url.split('://', 1)[1] for url in prefills + decodes]
    assert jobs.get('sglang_worker', []) == (workers if metrics else []), f"{inventory}: worker targets {jobs.get('sglang_worker')}"
    assert all(t.endswith(':9100') for t in jobs['node']) and len(jobs['node']) == len(set(jobs['node'])), jobs['node']
    assert jobs['amd_device_metrics'] == ['10.0.0.10:5000']
    with open(host_dir / 'targets.json', encoding='utf-8') as handle:
        listed = json.load(handle)
    assert sorted(t['target'] for t in listed) == sorted(t for job, ts in jobs.items() if job != 'prometheus' for t in ts)
    router = [s for job in config['scrape_configs'] if job['job_name'] == 'sglang_router' for s in job['static_configs']]
    assert router[0]['labels'] == {'host': router_host}


def test_services_bind_the_service_address(rendered):
    inventory, _metrics, shape, host_dir = rendered
    address = shape[2]
    for name, port in (('prometheus.default', 9090), ('prometheus-node-exporter.default', 9100)):
        text = (host_dir / name).read_text(encoding='utf-8')
        assert f'--web.listen-address={address}:{port}' in text, f"{inventory}: {name} does not bind {address}:{port}:\n{text}"
        args = [line for line in text.splitlines() if line.startswith('ARGS=')]
        assert len(args) == 1 and '0.0.0.0' not in args[0], f"{inventory}: {name} binds every interface:\n{text}"
    datasource = yaml.safe_load((host_dir / 'grafana-datasource.yml').read_text(encoding='utf-8'))
    assert datasource['datasources'][0]['url'] == f'http://{address}:9090'


def _series(router, values):
    return {'series': f'smg_worker_health{{job="sglang_router",instance="{router}:29000",host="r",worker="{values[0]}"}}',
            'values': values[1]}


def test_pd_alerts_fire_on_the_plan(rendered, tmp_path):
    """promtool test rules: the router loses every healthy prefill (its decodes stay healthy); a worker
    target goes down; TTFT, queue depth and KV transfer failures cross their thresholds."""
    _inventory, _metrics, shape, host_dir = rendered
    _group, _host, _address, _router_host, router_address, prefills, decodes = shape
    router = f'{router_address}:29000'
    up = {'series': f'up{{job="sglang_router",instance="{router}",host="r"}}', 'values': '1x20'}
    health = [_series(router_address, (prefills[0], '1x4 0x16'))] + [_series(router_address, (url, '1x20')) for url in decodes]
    worker = {'job': 'sglang_worker', 'instance': prefills[0].split('://', 1)[1], 'host': 'p', 'service': 'sglang-prefill',
              'worker_type': 'prefill'}
    labels = ','.join(f'{k}="{v}"' for k, v in worker.items())
    series = [up] + health + [
        {'series': f'up{{{labels}}}', 'values': '1x4 0x16'},
        {'series': f'sglang:num_queue_reqs{{{labels}}}', 'values': '0x4 500x16'},
        {'series': f'sglang:num_transfer_failed_reqs_total{{{labels}}}', 'values': '0x4 3+3x16'},
        {'series': f'sglang:time_to_first_token_seconds_bucket{{{labels},le="1"}}', 'values': '0+10x20'},
        {'series': f'sglang:time_to_first_token_seconds_bucket{{{labels},le="8"}}', 'values': '0+10x20'},
        {'series': f'sglang:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}}', 'values': '0+100x20'},
    ]
    alert = {k: v for k, v in worker.items() if k != 'job'}
    tests = {
        'rule_files': [str(host_dir / 'sglang_pd.rules.yml')],
        'evaluation_interval': '1m',
        'tests': [{
            'interval': '1m',
            'input_series': series,
            'alert_rule_test': [
                {'eval_time': '3m', 'alertname': 'SGLangPDRouterNoHealthyPrefill', 'exp_alerts': []},
                {'eval_time': '10m', 'alertname': 'SGLangPDRouterNoHealthyPrefill', 'exp_alerts': [
                    {'exp_labels': {'severity': 'critical', 'instance': router, 'host': 'r'}}]},
                {'eval_time': '10m', 'alertname': 'SGLangPDRouterNoHealthyDecode', 'exp_alerts': []},
                {'eval_time': '10m', 'alertname': 'SGLangPDTargetDown', 'exp_alerts': [
                    {'exp_labels': dict(worker, severity='critical'),
                     'exp_annotations': {'summary': f"sglang_worker target {worker['instance']} on p is down"}}]},
                {'eval_time': '10m', 'alertname': 'SGLangPDQueueDeep', 'exp_alerts': [
                    {'exp_labels': dict(alert, severity='warning'),
                     'exp_annotations': {'summary': '500 requests wait in the queues of sglang-prefill on p'}}]},
                {'eval_time': '10m', 'alertname': 'SGLangPDKVTransferFailures', 'exp_alerts': [
                    {'exp_labels': dict(alert, severity='warning'),
                     'exp_annotations': {'summary': '15 KV bootstrap or transfer failures in 5 minutes on sglang-prefill (p)'}}]},
                # p99 falls in the +Inf bucket: histogram_quantile answers the last finite bound, 8 s.
                {'eval_time': '10m', 'alertname': 'SGLangPDTTFTHigh', 'exp_alerts': [
                    {'exp_labels': dict(alert, severity='warning'),
                     'exp_annotations': {'summary': 'TTFT p99 of sglang-prefill on p is 8s'}}]},
            ],
        }],
    }
    tests['tests'][0]['alert_rule_test'][1]['exp_alerts'][0]['exp_annotations'] = {
        'summary': f'Router {router} on r has no healthy prefill worker'}
    test_file = tmp_path / 'rules_test.yml'
    test_file.write_text(yaml.safe_dump(tests), encoding='utf-8')
    run_promtool('test', 'rules', str(test_file))
