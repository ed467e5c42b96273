# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""A PD fleet of local processes on loopback: SGLang stand-ins (tests/standin) behind the real SMG router.

Used by the integration tests and the benches that need the real router's behaviour (health
checks, worker API) without containers. Every process runs in its own process group and is
killed by ``close``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STANDIN_DIR = Path(__file__).resolve().parents[1] / 'standin'
MODEL = 'glm-test'


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return int(sock.getsockname()[1])


def wait_until_listening(port, proc, log_path, seconds=20):
    deadline = time.monotonic() + seconds
    while True:
        assert proc.poll() is None, 'exited: %s' % log_path.read_text(errors='replace')[-3000:]
        try:
            socket.create_connection(('127.0.0.1', port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, 'nothing listens on %d: %s' % (port, log_path.read_text()[-3000:])
            time.sleep(0.1)


def start(argv, log_path, env=None):
    """Start ARGV in its own process group, its output in LOG_PATH."""
    with log_path.open('wb') as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def start_smg(prefill, decodes, port, log_path, extra_args=()):
    """SMG (`python -m smg.launch_router`, not the `smg` script sglang-router installs too) in PD mode
    on 127.0.0.1:PORT over PREFILL and DECODES, EXTRA_ARGS added; returns once it listens."""
    argv = [sys.executable, '-m', 'smg.launch_router', '--pd-disaggregation',
            '--host', '127.0.0.1', '--port', str(port),
            '--prometheus-host', '127.0.0.1', '--prometheus-port', str(free_port()),
            '--prefill', prefill.url, str(prefill.bootstrap_port)]
    for decode in decodes:
        argv += ['--decode', decode.url]
    proc = start(argv + list(extra_args), log_path)
    try:
        wait_until_listening(port, proc, log_path)
    except BaseException:
        stop(proc)
        raise
    return proc


class Standin:
    """An SGLang stand-in server in MODE, listening on 127.0.0.1:PORT (ENV added to its environment)."""

    def __init__(self, mode, port, log_dir, model_dir, api_key=None, env=None):
        self.mode = mode
        self.port, self.bootstrap_port = port, free_port()
        self.url = 'http://127.0.0.1:%d' % port
        self.log_path = log_dir / ('%s-%d.log' % (mode, port))
        full_env = dict(os.environ, PYTHONPATH=str(STANDIN_DIR), SGLANG_STANDIN_WARMUP_SECS='0', **(env or {}))
        self.proc = start([sys.executable, '-m', 'sglang.launch_server', '--disaggregation-mode', mode,
                           '--host', '127.0.0.1', '--port', str(port),
                           '--disaggregation-bootstrap-port', str(self.bootstrap_port),
                           '--model-path', str(model_dir), '--served-model-name', MODEL]
                          + (['--api-key', api_key] if api_key else []), self.log_path, full_env)
        wait_until_listening(port, self.proc, self.log_path)


class LocalPd:
    """One prefill and DECODES decode stand-ins behind SMG (ROUTER_ARGS added to its command line)."""

    def __init__(self, log_dir, model_dir, decodes=2, router_args=(), decode_env=None):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = log_dir
        self.procs = []
        try:
            self.prefill = Standin('prefill', free_port(), log_dir, model_dir)
            self.procs.append(self.prefill.proc)
            self.decodes = []
            for index in range(decodes):
                env = (decode_env or {}).get(index)
                self.decodes.append(Standin('decode', free_port(), log_dir, model_dir, env=env))
                self.procs.append(self.decodes[-1].proc)
            self.router_port = free_port()
            self.router_url = 'http://127.0.0.1:%d' % self.router_port
            self.router = start_smg(self.prefill, self.decodes, self.router_port, log_dir / 'smg.log', router_args)
            self.procs.append(self.router)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def model_dir(parent):
        """A model directory the stand-in accepts (config.json is all it reads)."""
        model_dir = Path(parent) / 'models' / 'glm'
        model_dir.mkdir(parents=True, exist_ok=True)
        (model_dir / 'config.json').write_text(json.dumps({"architectures": ["StandinForCausalLM"], "model_type": "standin"}))
        return model_dir

    def workers(self):
        with urllib.request.urlopen(self.router_url + '/workers', timeout=5) as resp:
            return json.loads(resp.read())['workers']

    def wait_healthy(self, seconds=60):
        """Until the router lists every stand-in, healthy."""
        want = sorted(s.url for s in [self.prefill] + self.decodes)
        deadline = time.monotonic() + seconds
        while True:
            try:
                healthy = sorted(w['url'] for w in self.workers() if w.get('is_healthy'))
            except OSError:
                healthy = []
            if healthy == want:
                return
            assert time.monotonic() < deadline, 'the router did not list every worker healthy: %s' % healthy
            time.sleep(0.3)

    def popen(self, argv, log_path, env=None):
        proc = start(argv, log_path, env)
        self.procs.append(proc)
        return proc

    def close(self):
        for proc in reversed(self.procs):
            stop(proc)
