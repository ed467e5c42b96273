# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A worker that does not become healthy fails its host with the end of its log, secrets redacted.

The real task file (roles/sglang_worker/tasks/health.yml) runs through ansible-runner on the
controller against a real container that logs a key and exits, and a port nobody answers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import yaml

from image_names import image_exists, setup_image

ansible_runner = pytest.importorskip('ansible_runner')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
IMAGE = setup_image('SGLANG_PD_BASE_IMAGE')
NAME = 'sglang-pd-test-unhealthy-worker'
KEY = 'worker-key-7d3c1f'


pytestmark = [pytest.mark.docker, pytest.mark.skipif(not image_exists(IMAGE), reason=IMAGE + ' is built by make setup')]


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture
def crashed_worker():
    subprocess.run(['docker', 'rm', '-f', NAME], capture_output=True, check=False)
    # One stream: docker logs --tail merges stdout and stderr by time, and may miss a stderr line
    # written just before the exit; the tail and the redaction are what this test is about.
    script = 'for i in $(seq 1 60); do echo "loading shard $i"; done; echo "server_args api_key=%s"; ' \
             'echo "RuntimeError: HIP out of memory"; exit 1' % KEY
    subprocess.run(['docker', 'run', '--name', NAME, IMAGE, 'sh', '-c', script], capture_output=True, check=False)
    yield NAME
    subprocess.run(['docker', 'rm', '-f', NAME], capture_output=True, check=False)


def test_the_failure_shows_the_end_of_the_log_without_the_key(tmp_path, crashed_worker):
    playbook = tmp_path / 'health.yml'
    playbook.write_text(yaml.safe_dump([{
        'name': 'Wait for an unhealthy worker',
        'hosts': 'localhost',
        'gather_facts': False,
        'tasks': [{'name': 'Run the health wait of the worker role',
                   'ansible.builtin.include_role': {'name': 'mindverse.sglang_pd.sglang_worker', 'tasks_from': 'health.yml'}}],
    }]))
    (tmp_path / 'runner').mkdir()
    worker = {'name': crashed_worker, 'url': 'http://127.0.0.1:%d' % _free_port(), 'serves_http': True}
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / 'runner'),
        playbook=str(playbook),
        inventory='localhost ansible_connection=local ansible_python_interpreter=' + sys.executable,
        extravars={'__sglang_worker_here': [worker], 'sglang_worker_health_timeout': 2,
                   '__sglang_worker_plan': {'secret': {'args': ['--api-key', KEY]}}},
        envvars={'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
                 'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
                 'ANSIBLE_NOCOLOR': 'true'},
        quiet=True,
    )
    stdout = runner.stdout.read()
    assert runner.rc != 0, stdout
    failed = [e for e in runner.events if e['event'] == 'runner_on_failed' and e['event_data']['task'] == 'Fail with the end of each log']
    assert len(failed) == 1, stdout
    message = failed[0]['event_data']['res']['msg']
    assert '%s (%s) did not answer /health_generate within 2 s' % (crashed_worker, worker['url']) in message
    assert 'The last 40 lines of its container' in message
    assert 'RuntimeError: HIP out of memory' in message
    assert 'server_args api_key=<redacted>' in message
    # The last 40 lines of the log: shards 23-60, the key line and the error.
    assert "'loading shard 23'" in message and "'loading shard 22'" not in message
    assert KEY not in stdout and KEY not in str(runner.events)
