# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import socket

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._drain import (
    Drainer,
    Unavailable,
    parse_load,
    parse_metrics,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HttpClient, HttpRequestError
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_drain
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from fake_sglang import App, FakeServer, Reply
from module_runner import run_module, run_module_stdout

FAST = dict(interval=0.01, settle=2, timeout=5)
METRICS = """# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="glm",engine_type="unified",dp="0"} %s
sglang:num_running_reqs{model_name="glm",engine_type="unified",dp="1"} %s
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="glm",dp="0"} %s
sglang:num_used_tokens{model_name="glm"} 123.0
"""


class LoadApp(App):
    """Answers the next of ``loads`` (an int, or an exception-free Reply) on each reading."""

    def __init__(self, loads, get_load=True, metrics=True, **kwargs):
        super().__init__(**kwargs)
        self.loads = list(loads)
        self.get_load = get_load
        self.metrics = metrics

    def _next(self):
        return self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]

    def route(self, request):
        if request.path == '/get_load' and self.get_load:
            n = self._next()
            return Reply(200, [{'dp_rank': 0, 'num_reqs': n, 'num_waiting_reqs': 0, 'num_tokens': 7 * n}])
        if request.path == '/metrics' and self.metrics:
            n = self._next()
            return Reply(200, METRICS % (float(n), 0.0, 0.0), content_type='text/plain; version=0.0.4')
        return Reply(404, {'detail': 'Not Found'})


def free_url():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return 'http://127.0.0.1:%d' % port


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize('body, expected', [
    ([{'dp_rank': 0, 'num_reqs': 3, 'num_waiting_reqs': 2, 'num_tokens': 100}], 5),
    ([{'dp_rank': 0, 'num_reqs': 1}, {'dp_rank': 1, 'num_reqs': 4, 'num_waiting_reqs': 1}], 6),
    ({'loads': [{'dp_rank': 0, 'num_reqs': 2, 'num_waiting_reqs': 0}]}, 2),
    ({'dp_rank': 0, 'num_reqs': 0, 'num_waiting_reqs': 0}, 0),
])
def test_get_load_bodies(body, expected):
    assert parse_load(body) == expected


@pytest.mark.parametrize('body', [[], {}, [1, 2], [{'dp_rank': 0}], [{'num_reqs': 'many'}], 'busy'])
def test_get_load_bodies_without_a_number(body):
    with pytest.raises(Unavailable):
        parse_load(body)


def test_metrics_are_summed_over_labels_and_names():
    assert parse_metrics(METRICS % (2.0, 3.0, 1.0)) == 6


def test_metrics_without_the_gauges():
    with pytest.raises(Unavailable, match='none of sglang:num_queue_reqs, sglang:num_running_reqs'):
        parse_metrics('sglang:num_used_tokens 4\n')


def test_metric_names_are_an_option():
    assert parse_metrics(METRICS % (2.0, 3.0, 1.0), ['sglang:num_queue_reqs']) == 1


# ------------------------------------------------------------------ polling
class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def drainer(server_url, clock=None, **kwargs):
    clock = clock or FakeClock()
    options = dict(FAST)
    options.update(kwargs)
    return Drainer(HttpClient(timeout=2), server_url, clock=clock, sleep=clock.sleep, **options)


def test_waits_for_settled_zero():
    app = LoadApp([3, 1, 0, 2, 0, 0, 5])
    with FakeServer(app) as server:
        ok, result = drainer(server.url).run()
    assert ok
    assert result['drained'] is True
    assert result['readings'] == [3, 1, 0, 2, 0, 0]
    assert (result['source'], result['max_in_flight'], result['polls']) == ('get_load', 3, 6)


def test_auto_falls_back_to_metrics():
    app = LoadApp([1, 0], get_load=False)
    with FakeServer(app) as server:
        ok, result = drainer(server.url).run()
    assert ok and result['source'] == 'metrics'
    assert result['readings'] == [1, 0, 0]
    # get_load is not asked again once metrics answered
    assert [r.path for r in app.requests].count('/get_load') == 1


def test_timeout_reports_what_is_left():
    clock = FakeClock()
    app = LoadApp([4])
    with FakeServer(app) as server:
        ok, result = drainer(server.url, clock=clock, timeout=1, interval=0.25).run()
    assert not ok
    assert result['drained'] is False and result['in_flight'] == 4
    assert 'still had 4 request(s) in flight after 1.0 s' in result['msg']
    assert clock.now == pytest.approx(1.0)


def test_no_load_source():
    app = LoadApp([0], get_load=False, metrics=False)
    with FakeServer(app) as server:
        ok, result = drainer(server.url).run()
    assert not ok
    assert 'reports no load' in result['msg'] and '/get_load answered HTTP 404' in result['msg']
    assert result['in_flight'] is None


def test_server_down_is_drained():
    ok, result = drainer(free_url()).run()
    assert ok and result['drained'] is True and result['reachable'] is False


class FakeResponse:
    status = 200

    def __init__(self, url, data):
        self.url = url
        self._data = data

    def json(self):
        return self._data


def test_a_server_that_accepts_but_never_answers_fails_closed():
    # A hung worker: the connection is accepted, no answer comes within the request timeout.
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(16)
    clock = FakeClock()
    try:
        url = 'http://127.0.0.1:%d' % listener.getsockname()[1]
        ok, result = Drainer(HttpClient(timeout=0.2), url, clock=clock, sleep=clock.sleep, timeout=1, interval=0.25,
                             request_timeout=0.2).run()
    finally:
        listener.close()
    assert not ok
    assert result['drained'] is False and result['reachable'] is False and result['in_flight'] is None
    assert 'did not answer for its load within 1.0 s' in result['msg'] and 'not counted drained' in result['msg']
    assert result['polls'] == 5


def test_a_server_that_answers_again_is_read_to_the_end():
    class Flaky:
        def __init__(self):
            self.calls = 0

        def request(self, method, url, timeout=None):
            self.calls += 1
            if self.calls <= 2:
                raise HttpRequestError(method, url, 'timed out')
            return FakeResponse(url, [{'num_reqs': 0, 'num_waiting_reqs': 0}])

    clock = FakeClock()
    ok, result = Drainer(Flaky(), 'http://w', source='get_load', clock=clock, sleep=clock.sleep, timeout=5,
                         interval=0.5, settle=2).run()
    assert ok and result['drained'] is True and result['reachable'] is True and result['polls'] == 4


def test_check_mode_reads_once():
    app = LoadApp([2, 0])
    with FakeServer(app) as server:
        ok, result = drainer(server.url, check_mode=True).run()
    assert ok and result['drained'] is False and result['polls'] == 1 and result['in_flight'] == 2


# ------------------------------------------------------------------ module
def test_module_drains(capsys):
    app = LoadApp([2, 0], api_key='k')
    with FakeServer(app) as server:
        result = run_module_stdout(sglang_drain, dict(url=server.url, interval=0.01, settle=2, api_key='k'), capsys)
    assert result['drained'] is True and result['changed'] is False
    assert 'k' not in [v for v in result.values() if isinstance(v, str)]
    assert app.requests[0].headers['Authorization'] == 'Bearer k'


def test_module_timeout_fails_or_warns():
    app = LoadApp([1])
    with FakeServer(app) as server:
        failed = run_module(sglang_drain, dict(url=server.url, interval=0.05, timeout=0.2))
        warned = run_module(sglang_drain, dict(url=server.url, interval=0.05, timeout=0.2, fail_on_timeout=False))
    assert failed['failed'] is True and 'still had 1 request(s)' in failed['msg']
    assert 'failed' not in warned and warned['drained'] is False


def test_module_without_source_fails_even_without_fail_on_timeout():
    app = LoadApp([0], get_load=False, metrics=False)
    with FakeServer(app) as server:
        result = run_module(sglang_drain, dict(url=server.url, fail_on_timeout=False))
    assert result['failed'] is True and 'reports no load' in result['msg']


@pytest.mark.parametrize('args, message', [
    (dict(timeout=0), 'timeout must be greater than 0'),
    (dict(interval=-1), 'interval must be greater than 0'),
    (dict(settle=0), 'settle must be 1 or more'),
])
def test_module_refuses_bad_numbers(args, message):
    result = run_module(sglang_drain, dict(url='http://127.0.0.1:9', **args))
    assert result['failed'] is True and message in result['msg']


def test_module_check_mode():
    app = LoadApp([0])
    with FakeServer(app) as server:
        result = run_module(sglang_drain, dict(url=server.url), check_mode=True)
    assert result['drained'] is True and result['polls'] == 1
