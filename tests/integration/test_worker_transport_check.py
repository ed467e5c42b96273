# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The worker health gate reads the transport Mooncake chose, and fails a worker not on RDMA.

The real task file (roles/sglang_worker/tasks/health.yml, which ends with transport.yml)
runs through ansible-runner on the controller against a running SGLang stand-in
(tests/standin) that prints Mooncake's transport lines as configured. No container: a
``docker`` on PATH answers ``docker logs NAME`` with the stand-in's output, which is what
Docker would return for the stand-in running in a container.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ansible_runner = pytest.importorskip('ansible_runner')

REPO = Path(__file__).resolve().parents[2]
STANDIN_DIR = REPO / 'tests' / 'standin'
NAME = 'sglang-decode'
GATE_TASK = 'Fail each worker whose transfer engine did not choose RDMA'
REPORT_TASK = 'Report the transport of each worker'
FORCED_TCP = 'MC_FORCE_TCP is set, using TCP transport only'
RDMA = 'installTransport, type=rdma'

pytestmark = pytest.mark.skipif(sys.version_info < (3, 10), reason='the stand-in needs Python 3.10 or later')

DOCKER_SHIM = '''#!/bin/sh
# Test double of the docker CLI: only "docker logs [options] NAME", from LOGDIR/NAME.log.
[ "$1" = logs ] || { echo "docker test double: only docker logs is answered, got: $*" >&2; exit 2; }
for name; do :; done
[ -f "LOGDIR/$name.log" ] || { echo "Error response from daemon: No such container: $name" >&2; exit 1; }
cat "LOGDIR/$name.log"
'''


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture
def standin_worker(tmp_path, standin_model_dir):
    """Start a decode stand-in named NAME with the given environment; return its URL and log dir."""
    procs = []
    logs = tmp_path / 'logs'
    logs.mkdir()

    def _start(env, backend='mooncake'):
        port = _free_port()
        argv = [sys.executable, '-m', 'sglang.launch_server', '--disaggregation-mode', 'decode', '--host', '127.0.0.1',
                '--port', str(port), '--model-path', str(standin_model_dir), '--disaggregation-transfer-backend', backend,
                '--disaggregation-ib-device', 'mlx5_ib0,mlx5_ib1']
        environ = {key: value for key, value in os.environ.items() if key not in ('MC_FORCE_TCP', 'SGLANG_STANDIN_TRANSPORT')}
        environ.update(PYTHONPATH=str(STANDIN_DIR), SGLANG_STANDIN_WARMUP_SECS='0', **env)
        with (logs / f'{NAME}.log').open('wb') as out:
            procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environ))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert procs[-1].poll() is None, (logs / f'{NAME}.log').read_text()
            try:
                socket.create_connection(('127.0.0.1', port), timeout=1).close()
                return f'http://127.0.0.1:{port}', logs
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f'the stand-in did not listen on {port}: ' + (logs / f'{NAME}.log').read_text())

    yield _start
    for proc in procs:
        proc.terminate()
        proc.wait(10)


def _run_gate(tmp_path, url, logs, require_rdma, changed=()):
    """Run the worker role's health.yml for one worker; return (runner, stdout)."""
    shim_dir = tmp_path / 'bin'
    shim_dir.mkdir()
    shim = shim_dir / 'docker'
    shim.write_text(DOCKER_SHIM.replace('LOGDIR', str(logs)))
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    playbook = tmp_path / 'health.yml'
    playbook.write_text(yaml.safe_dump([{
        'name': 'Wait for a worker and check its transport',
        'hosts': 'localhost',
        'gather_facts': False,
        'tasks': [{'name': 'Run the health gate of the worker role',
                   'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_worker', 'tasks_from': 'health.yml'}}],
    }]))
    (tmp_path / 'runner').mkdir()
    worker = {'name': NAME, 'url': url, 'serves_http': True}
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / 'runner'),
        playbook=str(playbook),
        inventory='localhost ansible_connection=local ansible_python_interpreter=' + sys.executable,
        extravars={'__sglang_worker_here': [worker], 'sglang_worker_health_timeout': 30,
                   '__sglang_worker_plan': {'secret': {}, 'launch': {'options': {'disaggregation_transfer_backend': 'mooncake'}}},
                   'sglang_pd_require_rdma': require_rdma, 'sglang_service_changed_names': list(changed)},
        envvars={'ANSIBLE_CONFIG': str(REPO / 'ansible.cfg'),
                 'ANSIBLE_COLLECTIONS_PATH': str(REPO / '.cache' / 'collections'),
                 'ANSIBLE_NOCOLOR': 'true',
                 'PATH': str(shim_dir) + os.pathsep + os.environ.get('PATH', '')},
        quiet=True,
    )
    return runner, runner.stdout.read()


def _messages(runner, event, task):
    return [e['event_data']['res'].get('msg', '') for e in runner.events
            if e['event'] == event and e['event_data'].get('task') == task]


def test_a_worker_on_tcp_fails_its_health_gate_with_the_line_quoted(tmp_path, standin_worker):
    url, logs = standin_worker({'MC_FORCE_TCP': '1'})
    runner, stdout = _run_gate(tmp_path, url, logs, require_rdma=True)
    assert runner.rc != 0, stdout
    failed = _messages(runner, 'runner_on_failed', GATE_TASK)
    assert len(failed) == 1, stdout
    message = failed[0]
    assert message.startswith('sglang_pd_require_rdma is true'), message
    assert f'localhost: worker {NAME}: transport tcp, Mooncake moves the KV cache over TCP' in message
    assert f'transfer_engine_impl.cpp] {FORCED_TCP}"' in message
    assert 'unset MC_FORCE_TCP' in message and '--disaggregation-ib-device' in message


def test_a_worker_on_the_silent_tcp_fallback_fails_too(tmp_path, standin_worker):
    url, logs = standin_worker({'SGLANG_STANDIN_TRANSPORT': 'tcp'})
    runner, stdout = _run_gate(tmp_path, url, logs, require_rdma=True)
    assert runner.rc != 0, stdout
    failed = _messages(runner, 'runner_on_failed', GATE_TASK)
    assert len(failed) == 1 and 'Topology discovery complete. Found 0 HCAs."' in failed[0], stdout


def test_a_worker_on_rdma_passes_and_its_transport_is_reported(tmp_path, standin_worker):
    url, logs = standin_worker({})
    runner, stdout = _run_gate(tmp_path, url, logs, require_rdma=True)
    assert runner.rc == 0, stdout
    reports = _messages(runner, 'runner_on_ok', REPORT_TASK)
    assert len(reports) == 1 and len(reports[0]) == 1, stdout
    assert reports[0][0].startswith(f'localhost: worker {NAME}: Mooncake transport rdma (log line "I'), reports
    assert reports[0][0].endswith(f'transfer_engine_impl.cpp] {RDMA}")')
    assert not _messages(runner, 'runner_on_failed', GATE_TASK)


def test_without_the_requirement_tcp_is_only_reported(tmp_path, standin_worker):
    url, logs = standin_worker({'MC_FORCE_TCP': '1'})
    runner, stdout = _run_gate(tmp_path, url, logs, require_rdma=False)
    assert runner.rc == 0, stdout
    reports = _messages(runner, 'runner_on_ok', REPORT_TASK)
    assert len(reports) == 1 and len(reports[0]) == 1, stdout
    assert reports[0][0].startswith(f'localhost: worker {NAME}: Mooncake transport tcp (log line "I'), reports
    assert reports[0][0].endswith(f'{FORCED_TCP}")')


@pytest.mark.parametrize('changed, fails', [((), False), ((NAME,), True)])
def test_a_log_without_a_transport_line_fails_a_worker_started_in_this_run_only(tmp_path, standin_worker, changed, fails):
    """A worker running since an earlier run may have had its start-up lines rotated out of its log."""
    url, logs = standin_worker({}, backend='nixl')
    runner, stdout = _run_gate(tmp_path, url, logs, require_rdma=True, changed=changed)
    assert (runner.rc != 0) is fails, stdout
    reports = _messages(runner, 'runner_on_ok', REPORT_TASK)
    assert reports == [[f'localhost: worker {NAME}: Mooncake transport unknown (no transport line in its log)']], stdout
    if fails:
        [message] = _messages(runner, 'runner_on_failed', GATE_TASK)
        assert f'localhost: worker {NAME}: transport unknown' in message, message
