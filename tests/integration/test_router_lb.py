"""The balancer the sglang_router_lb role writes, run by the real HAProxy in front of two stand-in routers.

The role's configure entry point renders haproxy.cfg for two routers on this machine (the same
template and checks `haproxy -c` runs on a node); HAProxy then runs it in the foreground. The
stand-in routers (readiness_server.py) are processes of their own, so one can be killed outright.
Every wait is on a condition HAProxy or a router reports, with a generous deadline as a safety net.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from playbook_runner import run_play

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _haproxy_runtime as runtime

HAPROXY = shutil.which('haproxy') or '/usr/sbin/haproxy'
STANDIN = os.path.join(os.path.dirname(__file__), 'readiness_server.py')
BACKEND = 'sglang_router'
SAFETY = 60  # seconds: a deadline for waits that end within a few seconds when all is well

pytest.importorskip('ansible_runner')
pytestmark = pytest.mark.skipif(not os.path.exists(HAPROXY) or os.geteuid() != 0,
                                reason='needs HAProxy (make setup installs it) and root (its socket is root only)')


# router_1 listens on IPv6 loopback: its server line carries the address in brackets.
ADDRESSES = {'router_0': '127.0.0.1', 'router_1': '::1', 'lb': '127.0.0.1', 'metrics': '127.0.0.1'}


def _free_port(address):
    with socket.socket(socket.AF_INET6 if ':' in address else socket.AF_INET) as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def _until(condition, what):
    """Wait until CONDITION() is true, reading it again every 50 ms; fail after SAFETY seconds."""
    deadline = time.monotonic() + SAFETY
    while not condition():
        assert time.monotonic() < deadline, f'still waiting after {SAFETY} s for {what}'
        time.sleep(0.05)


@pytest.fixture(scope='module')
def rendered(tmp_path_factory):
    """The role's haproxy.cfg for routers router_0 and router_1, and the ports it uses."""
    tmp = tmp_path_factory.mktemp('lb')
    ports = {name: _free_port(address) for name, address in ADDRESSES.items()}
    local = {'ansible_connection': 'local', 'ansible_become': False, 'ansible_python_interpreter': sys.executable,
             'sglang_pd_service_address': '127.0.0.1'}
    inventory = {'all': {'vars': local, 'children': {
        'sglang_router': {'hosts': {name: {'sglang_router_port': ports[name], 'sglang_pd_service_address': ADDRESSES[name]}
                                    for name in ('router_0', 'router_1')}},
        'sglang_router_lb': {'hosts': {'lb_0': {}}},
    }}}
    config, sock = tmp / 'haproxy.cfg', tmp / 'admin.sock'
    play = {'name': 'Render the balancer', 'hosts': 'sglang_router_lb', 'gather_facts': False, 'tasks': [
        {'name': 'Write haproxy.cfg', 'ansible.builtin.include_role': {
            'name': 'mindverse.sglang_pd.sglang_router_lb', 'tasks_from': 'configure'},
         'vars': {'sglang_router_lb_config_path': str(config), 'sglang_router_lb_socket': str(sock),
                  'sglang_router_lb_port': ports['lb'], 'sglang_router_lb_prometheus_port': ports['metrics']}}]}
    run_play(tmp, play, inventory, name='render')
    return {'config': str(config), 'socket': str(sock), 'ports': ports, 'inventory': inventory, 'tmp': tmp}


class Fleet:
    """HAProxy and the two stand-in routers, running."""

    def __init__(self, rendered):
        self.ports, self.socket = rendered['ports'], rendered['socket']
        self.routers = {}
        for name in ('router_0', 'router_1'):
            process = subprocess.Popen([sys.executable, STANDIN, name, ADDRESSES[name], str(self.ports[name])],
                                       stdout=subprocess.PIPE, text=True)
            assert process.stdout.readline().strip() == 'ready'
            self.routers[name] = process
        self.haproxy = subprocess.Popen([HAPROXY, '-db', '-f', rendered['config']], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _until(lambda: self.status('router_0') == 'UP' and self.status('router_1') == 'UP', 'both routers UP in HAProxy')

    def stop(self):
        for process in [self.haproxy, *self.routers.values()]:
            process.kill()
            process.wait()

    def status(self, server):
        """HAProxy's status of SERVER (show stat): UP, DOWN, DRAIN, MAINT...; '' before its socket answers."""
        try:
            rows = runtime.parse_stat(runtime.run_command(self.socket, 'show stat'))
        except runtime.HAProxyRuntimeError:
            return ''
        return next(row['status'] for row in rows if row['pxname'] == BACKEND and row['svname'] == server)

    def request(self, path='/v1/chat/completions'):
        """``(status, router)`` of one request through HAProxy, on a connection of its own."""
        client = http.client.HTTPConnection('127.0.0.1', self.ports['lb'], timeout=SAFETY)
        try:
            client.request('POST', path, body=b'{"messages": []}', headers={'Content-Type': 'application/json'})
            answer = client.getresponse()
            body = answer.read()
            return answer.status, json.loads(body).get('router') if answer.status == 200 else None
        finally:
            client.close()

    def control(self, router, action):
        client = http.client.HTTPConnection(ADDRESSES[router], self.ports[router], timeout=SAFETY)
        client.request('POST', '/control/' + action)
        assert client.getresponse().status == 204
        client.close()


@pytest.fixture
def fleet(rendered):
    running = Fleet(rendered)
    yield running
    running.stop()


def test_the_rendered_file_checks_health_on_readiness_and_retries_elsewhere(rendered):
    with open(rendered['config'], encoding='utf-8') as handle:
        text = handle.read()
    assert 'option httpchk GET /readiness' in text
    assert 'http-check expect status 200' in text
    assert 'option redispatch 1' in text
    assert f"stats socket {rendered['socket']} mode 600 level admin" in text
    assert f"server router_0 127.0.0.1:{rendered['ports']['router_0']} check" in text
    assert f"server router_1 [::1]:{rendered['ports']['router_1']} check" in text
    assert 'http-request use-service prometheus-exporter' in text


def test_requests_reach_both_routers_and_metrics_are_served(fleet):
    seen = [fleet.request() for _request in range(20)]
    assert {status for status, _router in seen} == {200}
    assert {router for _status, router in seen} == {'router_0', 'router_1'}
    client = http.client.HTTPConnection('127.0.0.1', fleet.ports['metrics'], timeout=SAFETY)
    client.request('GET', '/metrics')
    assert 'haproxy_server_status' in client.getresponse().read().decode()


def test_a_router_whose_readiness_fails_leaves_rotation_and_no_request_fails(fleet):
    fleet.control('router_1', 'unready')
    during, deadline = [], time.monotonic() + SAFETY
    while fleet.status('router_1') != 'DOWN':
        during.append(fleet.request())
        assert time.monotonic() < deadline, f'router_1 still in rotation {SAFETY} s after its readiness failed'
    after = [fleet.request() for _request in range(20)]
    assert {status for status, _router in during + after} == {200}
    assert {router for _status, router in after} == {'router_0'}


def _lb_server(rendered, state, wait_idle, name):
    """Run module sglang_lb_server on router_1 in a play; return its result."""
    play = {'name': 'Set router_1 at the balancer', 'hosts': 'lb_0', 'gather_facts': False, 'tasks': [
        {'name': 'Set the state', 'mindverse.sglang_pd.sglang_lb_server': {
            'socket': rendered['socket'], 'server': 'router_1', 'state': state, 'wait_idle': wait_idle, 'timeout': SAFETY},
         'register': 'lb'},
        {'name': 'Report', 'ansible.builtin.set_stats': {'data': {'lb': '{{ lb }}'}, 'per_host': False}}]}
    return run_play(rendered['tmp'], play, rendered['inventory'], name=name)['lb']


def test_a_drained_router_finishes_its_request_and_gets_no_new_one(fleet, rendered):
    # leastconn: two held requests, one on each router.
    held = [threading.Thread(target=lambda: results.append(fleet.request('/slow'))) for _request in range(2)]
    results = []
    for thread in held:
        thread.start()
        _until(lambda n=held.index(thread) + 1: sum(runtime.server_sessions(
            runtime.parse_stat(runtime.run_command(fleet.socket, 'show stat')), BACKEND, r) for r in ('router_0', 'router_1')) == n,
            'the held request at a router')
    drained = {}
    drain = threading.Thread(target=lambda: drained.update(_lb_server(rendered, 'drain', True, 'drain')))
    drain.start()
    _until(lambda: fleet.status('router_1') == 'DRAIN', 'router_1 drained')
    assert drain.is_alive(), 'the module stopped waiting while router_1 held a request'
    assert {fleet.request()[1] for _request in range(10)} == {'router_0'}
    fleet.control('router_1', 'release')
    drain.join(SAFETY)
    assert drained['changed'] is True
    assert (drained['state_before'], drained['state_after'], drained['idle'], drained['sessions']) == ('ready', 'drain', True, 0)
    assert drained['sessions_seen'][0] == 1
    fleet.control('router_0', 'release')
    for thread in held:
        thread.join(SAFETY)
    assert sorted(results) == [(200, 'router_0'), (200, 'router_1')]
    again = _lb_server(rendered, 'drain', True, 'drain_again')
    assert (again['changed'], again['state_before'], again['state_after']) == (False, 'drain', 'drain')
    ready = _lb_server(rendered, 'ready', False, 'ready')
    assert (ready['changed'], ready['state_before'], ready['state_after']) == (True, 'drain', 'ready')
    _until(lambda: fleet.status('router_1') == 'UP', 'router_1 back in rotation')


def test_a_router_killed_under_load_costs_no_client_a_refused_connection(fleet):
    """No client connection is refused, and every request made once HAProxy marked the router DOWN
    succeeds. A request the router held when it died may be cut (its answer had begun: it cannot be
    sent again), so at most one per client fails before that."""
    counts = {'ok': 0, 'refused': 0, 'failed': 0, 'failed_after_down': 0, 'router_1': 0}
    failures, stop, down, lock = [], threading.Event(), threading.Event(), threading.Lock()

    def client():
        while not stop.is_set():
            after_down = down.is_set()
            try:
                status, router = fleet.request()
                outcome = 'ok' if status == 200 else 'failed'
            except ConnectionRefusedError:
                outcome, router, status = 'refused', None, 'refused'
            except (OSError, http.client.HTTPException) as exc:
                outcome, router, status = 'failed', None, repr(exc)
            with lock:
                counts[outcome] += 1
                counts['router_1'] += router == 'router_1'
                if outcome == 'failed' and after_down:
                    counts['failed_after_down'] += 1
                if outcome != 'ok':
                    failures.append(status)

    clients = [threading.Thread(target=client) for _client in range(4)]
    for thread in clients:
        thread.start()
    _until(lambda: counts['router_1'] >= 20, 'router_1 serving under load')
    fleet.routers['router_1'].send_signal(signal.SIGKILL)
    _until(lambda: fleet.status('router_1') == 'DOWN', 'HAProxy marks the killed router DOWN')
    down.set()
    marked = counts['ok']
    _until(lambda: counts['ok'] >= marked + 50, 'requests after the router is out of rotation')
    stop.set()
    for thread in clients:
        thread.join(SAFETY)
    assert counts['refused'] == 0, (counts, failures)
    assert counts['failed_after_down'] == 0, (counts, failures)
    assert counts['failed'] <= len(clients), (counts, failures)
