# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import socket

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import (
    HealthPoller,
    HttpClient,
    HttpRequestError,
    HttpResponse,
)
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_health
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from fake_sglang import FakeServer, HealthApp
from module_runner import run_module, run_module_stdout

FAST = dict(interval=0.01, max_interval=0.02)


def free_port_url(path='/health_generate'):
    """A URL on 127.0.0.1 where nothing listens."""
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return 'http://127.0.0.1:%d%s' % (port, path)


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


class StubClient:
    """Answers from a list of statuses (an int) or transport errors (an exception)."""

    def __init__(self, answers, clock=None, cost=0.0):
        self.answers = list(answers)
        self.timeouts = []
        self.clock = clock
        self.cost = cost

    def request(self, method, url, body=None, timeout=None, **kwargs):
        self.timeouts.append(timeout)
        if self.clock is not None:
            self.clock.now += self.cost
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return HttpResponse(method, url, answer, b'', latency=self.cost)


class PhasedStub:
    """A server on the fake clock: refuses until REFUSE_UNTIL, answers 503 until HEALTHY_AT, then 200."""

    def __init__(self, clock, refuse_until, healthy_at, cost=0.125):
        self.clock = clock
        self.refuse_until = refuse_until
        self.healthy_at = healthy_at
        self.cost = cost
        self.sent_at = []
        self.answered = []

    def request(self, method, url, body=None, timeout=None, **kwargs):
        self.sent_at.append(self.clock.now)
        self.clock.now += self.cost
        if self.sent_at[-1] < self.refuse_until:
            self.answered.append(False)
            raise HttpRequestError(method, url, 'Connection refused', refused=True)
        self.answered.append(True)
        return HttpResponse(method, url, 200 if self.sent_at[-1] >= self.healthy_at else 503, b'', latency=self.cost)


# ----------------------------------------------------------------- backoff
@pytest.mark.parametrize('interval, refused_max_interval, expected', [
    (1, 10, [1, 2, 4, 8, 10, 10]),
    (0.5, 3, [0.5, 1, 2, 3, 3, 3]),
    (5, 5, [5, 5, 5, 5, 5, 5]),
])
def test_backoff_before_any_answer_grows_to_the_refused_cap(interval, refused_max_interval, expected):
    poller = HealthPoller(None, 'http://x', interval=interval, max_interval=1, refused_max_interval=refused_max_interval)
    assert [poller.backoff(n, answered=False) for n in range(1, 7)] == expected


@pytest.mark.parametrize('interval, max_interval, expected', [
    (1, 1, [1, 1, 1, 1, 1, 1]),
    (0.25, 1, [0.25, 0.5, 1, 1, 1, 1]),
    (1, 10, [1, 2, 4, 8, 10, 10]),
])
def test_backoff_after_an_answer_is_capped_at_max_interval(interval, max_interval, expected):
    poller = HealthPoller(None, 'http://x', interval=interval, max_interval=max_interval, refused_max_interval=60)
    assert [poller.backoff(n, answered=True) for n in range(1, 7)] == expected


# Refusing for REFUSE s, then 503 for WARM s, then 200: polled with interval 1, max_interval 1 and a
# refused cap of 8, as a worker loading its model and warming up is.
@pytest.mark.parametrize('refuse, warm', [(0, 0), (0, 30), (45, 0.5), (45, 3), (100, 12), (600, 2.5)])
def test_after_the_first_answer_no_gap_exceeds_max_interval(refuse, warm):
    clock = FakeClock()
    server = PhasedStub(clock, refuse_until=refuse, healthy_at=refuse + warm)
    poller = HealthPoller(server, 'http://x/health_generate', timeout=3600, interval=1, max_interval=1,
                          refused_max_interval=8, clock=clock, sleep=clock.sleep)
    ok, result = poller.run()
    assert ok and result['status'] == 200
    first_answer = server.answered.index(True)
    gaps = [b - a for a, b in zip(server.sent_at, server.sent_at[1:])]
    assert max(gaps[first_answer:], default=0) <= 1 + server.cost, gaps[first_answer:]
    # While refused, the waits double from 1 s up to the refused cap and stay there.
    refused_waits = clock.sleeps[:first_answer]
    assert refused_waits == [min(2 ** n, 8) for n in range(len(refused_waits))]
    # Seen healthy at most the refused cap late when it never answered 503, else at most max_interval late.
    lag = result['elapsed'] - (refuse + warm)
    assert lag <= (8 if server.answered.count(True) == 1 and refuse > 0 else 1) + 2 * server.cost, lag


def test_max_interval_holds_when_the_endpoint_stops_answering_again():
    clock = FakeClock()
    refused = HttpRequestError('GET', 'http://x', 'Connection refused', refused=True)
    client = StubClient([refused, refused, 503] + [refused] * 5 + [200], clock=clock)
    poller = HealthPoller(client, 'http://x', timeout=600, interval=1, max_interval=1, refused_max_interval=8,
                          clock=clock, sleep=clock.sleep)
    ok, result = poller.run()
    assert ok and result['attempts'] == 9
    assert clock.sleeps == [1, 2] + [1] * 6


def test_sleeps_follow_backoff_and_stop_at_the_deadline():
    clock = FakeClock()
    client = StubClient([503])
    poller = HealthPoller(client, 'http://x/health', timeout=30, initial_delay=5, interval=1, max_interval=10,
                          refused_max_interval=1, clock=clock, sleep=clock.sleep)
    ok, result = poller.run()
    assert not ok
    # initial delay, then 1, 2, 4, 8, then capped at 10 and cut to what is left of the 30 s.
    assert clock.sleeps == [5, 1, 2, 4, 8, 10]
    assert clock.now == 30
    assert result['attempts'] == 6
    assert result['elapsed'] == 30
    assert result['status'] == 503


def test_request_timeout_is_cut_to_the_time_left():
    clock = FakeClock()
    client = StubClient([503], clock=clock, cost=4.0)
    poller = HealthPoller(client, 'http://x/health', timeout=10, request_timeout=8, interval=1, max_interval=1,
                          clock=clock, sleep=clock.sleep)
    ok, _result = poller.run()
    assert not ok
    assert client.timeouts[0] == 8
    assert client.timeouts[1] == 5  # 10 - (4 + 1)
    assert all(t <= 8 for t in client.timeouts)


def test_transport_errors_are_retried():
    clock = FakeClock()
    client = StubClient([HttpRequestError('GET', 'http://x', 'Connection refused')] * 2 + [200], clock=clock)
    poller = HealthPoller(client, 'http://x', timeout=60, clock=clock, sleep=clock.sleep)
    ok, result = poller.run()
    assert ok
    assert result['attempts'] == 3
    # The defaults: from 1 s up to the refused cap of 2 s.
    assert clock.sleeps == [1, 2]


# ----------------------------------------------------------------- real HTTP
@pytest.mark.parametrize('fail_times', [0, 1, 3])
def test_turns_healthy_after_n_503(fail_times):
    app = HealthApp(fail_times=fail_times)
    with FakeServer(app) as server:
        url = server.url + '/health_generate'
        ok, result = HealthPoller(HttpClient(), url, timeout=10, **FAST).run()
    assert ok
    assert result['status'] == 200
    assert result['attempts'] == fail_times + 1
    assert result['url'] == url
    assert result['latency'] >= 0
    assert result['elapsed'] >= result['latency']
    assert len(app.requests) == fail_times + 1


def test_deadline_expires_with_last_status():
    app = HealthApp(fail_times=None)
    with FakeServer(app) as server:
        url = server.url + '/health_generate'
        # Long enough for two answers on a loaded machine: the poller must not give up before its deadline.
        ok, result = HealthPoller(HttpClient(), url, timeout=2, interval=0.05, max_interval=0.1).run()
    assert not ok
    assert result['status'] == 503
    assert result['attempts'] >= 2
    assert result['elapsed'] >= 2
    assert url in result['msg']
    assert 'HTTP status 200' in result['msg']
    assert 'answered HTTP 503' in result['msg']
    assert 'server is starting' in result['msg']


def test_deadline_expires_on_connection_refused():
    url = free_port_url()
    ok, result = HealthPoller(HttpClient(), url, timeout=0.2, **FAST).run()
    assert not ok
    assert result['status'] is None
    assert result['error']
    assert url in result['msg']
    assert 'without an HTTP answer' in result['msg']


def test_accepted_status_codes():
    app = HealthApp(fail_times=None, fail_status=503)
    with FakeServer(app) as server:
        ok, result = HealthPoller(HttpClient(), server.url + '/health_generate', status_codes=[200, 503],
                                  timeout=5, **FAST).run()
    assert ok
    assert result['status'] == 503
    assert result['attempts'] == 1


def test_post_with_json_body_headers_and_api_key():
    app = HealthApp(fail_times=0, api_key='s3cret')
    with FakeServer(app) as server:
        client = HttpClient(api_key='s3cret', headers={'X-Probe': 'yes'})
        ok, _result = HealthPoller(client, server.url + '/health_generate', method='POST',
                                   body={'text': 'hi'}, timeout=5, **FAST).run()
    assert ok
    request = app.requests[0]
    assert request.method == 'POST'
    assert request.json() == {'text': 'hi'}
    assert request.headers['Authorization'] == 'Bearer s3cret'
    assert request.headers['X-Probe'] == 'yes'
    assert request.headers['Content-Type'] == 'application/json'


def test_wrong_api_key_is_reported_as_401():
    app = HealthApp(fail_times=0, api_key='right')
    with FakeServer(app) as server:
        ok, result = HealthPoller(HttpClient(api_key='wrong'), server.url + '/health_generate',
                                  timeout=0.1, **FAST).run()
    assert not ok
    assert result['status'] == 401


# ----------------------------------------------------------------- module end to end
@pytest.mark.parametrize('check_mode', [False, True])
def test_module_success_and_check_mode(check_mode):
    app = HealthApp(fail_times=2)
    with FakeServer(app) as server:
        url = server.url + '/health_generate'
        result = run_module(sglang_health, dict(url=url, timeout=10, interval=0.01, max_interval=0.02),
                            check_mode=check_mode)
    assert result.get('failed') is not True, result
    assert result['changed'] is False
    assert result['status'] == 200
    assert result['attempts'] == 3
    assert result['url'] == url
    assert set(result) >= {'status', 'attempts', 'elapsed', 'latency', 'url'}
    # It only reads, so it really polls in check mode too.
    assert len(app.requests) == 3


def test_module_second_run_is_unchanged():
    app = HealthApp(fail_times=0)
    with FakeServer(app) as server:
        args = dict(url=server.url + '/health_generate', timeout=5)
        first = run_module(sglang_health, args)
        second = run_module(sglang_health, args)
    assert first['changed'] is False and second['changed'] is False
    assert second['attempts'] == 1


def test_module_fails_at_deadline():
    app = HealthApp(fail_times=None)
    with FakeServer(app) as server:
        url = server.url + '/health_generate'
        result = run_module(sglang_health, dict(url=url, timeout=0.2, interval=0.05, max_interval=0.05))
    assert result['failed'] is True
    assert result['changed'] is False
    assert result['status'] == 503
    assert url in result['msg'] and '503' in result['msg']


def test_module_rejects_bad_method():
    result = run_module(sglang_health, dict(url='http://127.0.0.1:1/health', method='PUT'))
    assert result['failed'] is True
    assert 'method' in result['msg']


@pytest.mark.parametrize('option', ['interval', 'max_interval', 'refused_max_interval'])
def test_module_rejects_a_non_positive_wait(option):
    # A short deadline: without the check, a zero wait would poll for the whole of it.
    result = run_module(sglang_health, {'url': 'http://127.0.0.1:1/health', 'timeout': 1, option: 0})
    assert result['failed'] is True
    assert option in result['msg'] and 'greater than 0' in result['msg']


def test_module_rejects_non_positive_timeout():
    result = run_module(sglang_health, dict(url='http://127.0.0.1:1/health', timeout=0))
    assert result['failed'] is True
    assert 'timeout' in result['msg']


def test_module_never_prints_the_api_key(capsys):
    app = HealthApp(fail_times=0, api_key='TOPSECRET-KEY-123')
    with FakeServer(app) as server:
        out = run_module_stdout(sglang_health, dict(url=server.url + '/health_generate',
                                                    api_key='TOPSECRET-KEY-123', timeout=5), capsys)
    assert out['status'] == 200
    assert app.requests[0].headers['Authorization'] == 'Bearer TOPSECRET-KEY-123'
    assert 'TOPSECRET-KEY-123' not in json.dumps(out)


# ----------------------------------------------------------------- many URLs in one call
def test_module_checks_every_url_at_once():
    slow, fast = HealthApp(fail_times=3), HealthApp(fail_times=0)
    with FakeServer(slow) as one, FakeServer(fast) as two:
        urls = [one.url + '/health_generate', two.url + '/health_generate']
        result = run_module(sglang_health, dict(urls=urls, timeout=10, interval=0.05, max_interval=0.05))
    assert result.get('failed') is not True, result
    assert [r['url'] for r in result['results']] == urls and [r['status'] for r in result['results']] == [200, 200]
    assert [r['attempts'] for r in result['results']] == [4, 1]
    # At the same time: the healthy URL answered while the other still waited for its fourth attempt.
    assert result['results'][1]['elapsed'] < result['results'][0]['elapsed']


def test_module_names_each_url_that_fails_among_many():
    healthy, sick = HealthApp(fail_times=0), HealthApp(fail_times=None)
    with FakeServer(healthy) as one, FakeServer(sick) as two:
        urls = [one.url + '/health_generate', two.url + '/health_generate', free_port_url()]
        result = run_module(sglang_health, dict(urls=urls, timeout=0.3, interval=0.05, max_interval=0.05))
    assert result['failed'] is True and result['msg'].startswith('2 of 3 URLs failed')
    assert urls[1] in result['msg'] and urls[2] in result['msg'] and urls[0] not in result['msg']
    assert [r['status'] for r in result['results']] == [200, 503, None]


def test_module_takes_url_or_urls_not_both():
    both = run_module(sglang_health, dict(url='http://127.0.0.1:1/health', urls=['http://127.0.0.1:1/health']))
    neither = run_module(sglang_health, dict(timeout=1))
    assert both['failed'] and 'mutually exclusive' in both['msg']
    assert neither['failed'] and 'one of the following is required' in neither['msg']
