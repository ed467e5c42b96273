# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/render.yml on the example inventories: what it writes is checked, not just written.

The render touches no host: every task runs on (or is delegated to) the controller.
For each example inventory the test parses every rendered command back and checks that
every SGLang flag is in the shipped allowlist, that the router is told every worker with
the right bootstrap port, that no two services share a port on a host, and that the
launch scripts run exactly the JSON's docker command.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import checks as pd_checks

ansible_runner = pytest.importorskip('ansible_runner')

ROUTER_KEY = 'router-key-4c1e9b'
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# sha256, mode and path of each file the render wrote for the example inventories when each
# host rendered its own services through the roles (before the render became one pass on the
# controller): the one-pass render must write the same bytes.
EXPECTED_FILES = os.path.join(os.path.dirname(__file__), 'render_expected.sha256')
VENV_BIN = os.path.dirname(sys.executable)
ALLOWLIST = pd_checks.flag_table({})[1].FLAGS
EXPECTED = {
    'example-1p3d': {
        'pd-node-0': ['sglang-prefill'],
        'pd-node-1': ['sglang-decode', 'sglang-router'],
        'pd-node-2': ['sglang-decode'],
        'pd-node-3': ['sglang-decode'],
    },
    'example-2p2d': {
        'pd-node-0': ['sglang-prefill', 'sglang-router'],
        'pd-node-1': ['sglang-prefill'],
        'pd-node-2': ['sglang-decode'],
        'pd-node-3': ['sglang-decode'],
    },
}


def run_render(private, inventory, out, extravars=None):
    """Run playbooks/render.yml into OUT; return what its one file_set call reported."""
    private.mkdir()
    runner = ansible_runner.run(
        private_data_dir=str(private),
        project_dir=REPO,
        playbook=os.path.join(REPO, 'playbooks', 'render.yml'),
        inventory=os.path.join(REPO, 'inventories', inventory),
        extravars=dict(render_dir=str(out), **(extravars or {})),
        envvars={
            'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
            'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
            # The example inventories read the router's key from the environment.
            'SGLANG_ROUTER_API_KEY': ROUTER_KEY,
            'ANSIBLE_NOCOLOR': 'true',
            'PATH': VENV_BIN + os.pathsep + os.environ.get('PATH', ''),
        },
        quiet=True,
    )
    stdout = runner.stdout.read()
    assert runner.rc == 0, stdout
    events = list(runner.events)
    assert not [e for e in events if e['event'] == 'runner_on_unreachable']
    writes = [e['event_data'] for e in events
              if e['event'] == 'runner_on_ok' and e['event_data'].get('task_action') == 'mindverse.sglang_pd.file_set']
    # Every file is written on the controller, inside render_dir, in one module call.
    assert len(writes) == 1, writes
    assert writes[0]['host'] == 'localhost'
    assert not [path for path in writes[0]['res']['written'] if path.startswith('/') or '..' in path.split('/')]
    return writes[0]['res']


def render(tmp_path, inventory, extravars=None):
    out = tmp_path / 'render'
    run_render(tmp_path / 'runner', inventory, out, extravars)
    return out


def load(out):
    services = {}
    for host in sorted(os.listdir(out)):
        for name in sorted(os.listdir(out / host)):
            if name.endswith('.json'):
                with open(out / host / name, encoding='utf-8') as handle:
                    services[(host, name[:-5])] = json.load(handle)
    return services


def script_argv(path):
    with open(path, encoding='utf-8') as handle:
        lines = [line for line in handle.read().splitlines() if not line.startswith('#')]
    words = shlex.split(' '.join(line.rstrip('\\') for line in lines))
    assert words[0] == 'exec'
    return words[1:]


def option(argv, flag):
    return [argv[i + 1] for i, token in enumerate(argv[:-1]) if token == flag]


@pytest.fixture(scope='module', params=sorted(EXPECTED))
def rendered(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(request.param)
    out = render(tmp_path, request.param)
    return request.param, out, load(out)


def test_every_host_and_service_is_rendered(rendered):
    inventory, out, services = rendered
    found = {}
    for host, service in services:
        found.setdefault(host, []).append(service)
        assert (out / host / (service + '.sh')).is_file()
    assert found == EXPECTED[inventory]


def test_render_writes_the_same_files_as_the_per_host_render(rendered):
    inventory, out, _services = rendered
    expected = {}
    with open(EXPECTED_FILES, encoding='utf-8') as handle:
        for line in handle:
            if line.strip() and not line.startswith('#'):
                digest, mode, path = line.split()
                if path.startswith(inventory + '/'):
                    expected[path[len(inventory) + 1:]] = (digest, int(mode, 8))
    found = {}
    for root, _dirs, names in os.walk(out):
        for name in names:
            path = os.path.join(root, name)
            with open(path, 'rb') as handle:
                found[os.path.relpath(path, out)] = (hashlib.sha256(handle.read()).hexdigest(),
                                                     os.stat(path).st_mode & 0o777)
    assert expected and found == expected


def test_a_second_render_writes_nothing(tmp_path):
    out = render(tmp_path, 'example-2p2d')
    again = run_render(tmp_path / 'again', 'example-2p2d', out)
    assert again['written'] == [] and again['unchanged'] == 10 and not again['changed']


def test_scripts_run_the_json_command(rendered):
    _inventory, out, services = rendered
    for (host, service), spec in services.items():
        argv = script_argv(out / host / (service + '.sh'))
        assert argv == ['/usr/bin/docker', 'run'] + spec['docker_args'] + [spec['image']] + spec['argv']
        assert spec['image'].startswith('registry.example.com/mindverse/sglang@sha256:')


def test_every_worker_flag_is_in_the_allowlist(rendered):
    _inventory, _out, services = rendered
    workers = [spec for spec in services.values() if spec['role'] == 'sglang_worker']
    assert workers
    for spec in workers:
        argv = spec['argv']
        # python -c LAUNCHER sglang.launch_server SECRET_FILE ...: the keys are in the secret file.
        assert argv[:2] == ['python', '-c'] and argv[3] == 'sglang.launch_server'
        assert spec['secret']['args'] == ['--api-key', '<redacted>']
        assert pd_checks.check_argv(argv, [''] * len(argv), ALLOWLIST, start=5) == []
        assert option(argv, '--disaggregation-mode') == [spec['mode']]
        assert option(argv, '--kv-cache-dtype') == ['fp8_e4m3']
        assert option(argv, '--tp-size') == ['8']
        assert option(argv, '--attention-backend') == ['aiter']


def test_production_ports(rendered):
    _inventory, _out, services = rendered
    for spec in services.values():
        if spec['role'] == 'sglang_worker':
            assert option(spec['argv'], '--port') == [{'prefill': '30100', 'decode': '30200'}[spec['mode']]]
            if spec['mode'] == 'prefill':
                assert option(spec['argv'], '--disaggregation-bootstrap-port') == ['8998']


def test_router_sees_every_worker_with_its_bootstrap_port(rendered):
    _inventory, _out, services = rendered
    routers = [spec for spec in services.values() if spec['role'] == 'sglang_router']
    assert len(routers) == 1
    argv, workers = routers[0]['argv'], routers[0]['workers']
    # python -c LAUNCHER sglang_router.launch_router SECRET_FILE ...: the launcher appends the
    # workers of the env file (the same list as the JSON's workers) and the secret arguments.
    assert argv[:2] == ['python', '-c'] and argv[3] == 'sglang_router.launch_router'
    assert argv[5] == '--pd-disaggregation'
    assert routers[0]['env']['SGLANG_PD_ROUTER_WORKERS'] == ' '.join(workers)
    assert '--prefill' not in argv and '--decode' not in argv
    told = {workers[i + 1]: workers[i + 2] for i, token in enumerate(workers) if token == '--prefill'}
    prefills = {spec['url']: option(spec['argv'], '--disaggregation-bootstrap-port')[0]
                for spec in services.values() if spec.get('mode') == 'prefill'}
    assert told == prefills
    decodes = sorted(spec['url'] for spec in services.values() if spec.get('mode') == 'decode')
    assert sorted(option(workers, '--decode')) == decodes
    for url in list(told) + decodes:
        assert not url.startswith('http://127.'), url


def test_no_port_collisions(rendered):
    _inventory, _out, services = rendered
    used = {}
    for (host, service), spec in services.items():
        flags = ['--port', '--disaggregation-bootstrap-port', '--prometheus-port']
        for flag in flags:
            for port in option(spec['argv'], flag):
                assert (host, port) not in used, f'{host}: {service} {flag} {port} also used by {used[(host, port)]}'
                used[(host, port)] = f'{service} {flag}'


def test_router_metrics_are_not_on_every_interface(rendered):
    _inventory, _out, services = rendered
    for spec in services.values():
        if spec['role'] == 'sglang_router':
            assert option(spec['argv'], '--prometheus-host') != ['0.0.0.0']
            assert option(spec['argv'], '--prometheus-host') == [spec['url'].split('//')[1].split(':')[0]]


def test_router_reads_the_workers_tokenizer_locally_and_offline(rendered):
    """--tokenizer-path is the workers' model path, mounted from the same host directory."""
    _inventory, _out, services = rendered
    workers = [s for s in services.values() if s['role'] == 'sglang_worker']
    model_paths = {option(s['argv'], '--model-path')[0] for s in workers}
    assert len(model_paths) == 1
    model_path = model_paths.pop()
    worker_mounts = {v for s in workers for v in option(s['docker_args'], '--volume')}
    for spec in services.values():
        assert spec['env'].get('HF_HUB_OFFLINE') == '1' and spec['env'].get('TRANSFORMERS_OFFLINE') == '1'
        if spec['role'] == 'sglang_router':
            assert option(spec['argv'], '--tokenizer-path') == [model_path]
            mounts = [m for m in option(spec['docker_args'], '--volume') if not m.endswith('/secret.json:ro')]
            assert len(mounts) == 1 and mounts[0] in worker_mounts
            assert model_path.startswith(mounts[0].split(':')[1].rstrip('/') + '/')


def test_api_keys_are_redacted_in_the_render(tmp_path):
    out = render(tmp_path, 'example-1p3d', {'sglang_router_api_key': 'hunter2-secret'})
    spec = load(out)[('pd-node-1', 'sglang-router')]
    assert spec['secret'] == {'args': ['--api-key', '<redacted>']}
    assert spec['argv'][4] == '/run/sglang-pd/secret.json'
    assert '/etc/sglang-pd/sglang-router.secret.json:/run/sglang-pd/secret.json:ro' in spec['docker_args']
    for root, _dirs, files in os.walk(out):
        for name in files:
            with open(os.path.join(root, name), encoding='utf-8') as handle:
                assert 'hunter2-secret' not in handle.read()


def test_rendered_docs_are_in_step(rendered):
    inventory, out, _services = rendered
    sys.path.insert(0, os.path.join(REPO, 'scripts'))
    try:
        import gen_rendered_docs  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    with open(os.path.join(REPO, 'docs', 'rendered', inventory + '.md'), encoding='utf-8') as handle:
        assert handle.read() == gen_rendered_docs.markdown(inventory, str(out)), \
            'docs/rendered/%s.md is out of date: run python scripts/gen_rendered_docs.py' % inventory


def test_router_takes_a_hung_worker_out_of_rotation_within_10_s(rendered):
    """The router checks /health_generate (it asks the scheduler) often enough to drop a hung worker fast."""
    _inventory, _out, services = rendered
    routers = [s for s in services.values() if s['role'] == 'sglang_router']
    assert routers
    for spec in routers:
        argv = spec['argv']
        assert option(argv, '--health-check-endpoint') == ['/health_generate']
        interval, timeout = int(option(argv, '--health-check-interval-secs')[0]), int(option(argv, '--health-check-timeout-secs')[0])
        failures = int(option(argv, '--health-failure-threshold')[0])
        assert failures * (interval + timeout) <= 10
