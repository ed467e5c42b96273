# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import re
from urllib.parse import quote

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _router_api
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HttpClient
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._router_api import (
    RouterClient,
    RouterError,
    RouterWorkers,
    normalise_worker,
    parse_worker_type,
    summarise,
)
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_router_workers
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from fake_sglang import App, FakeServer, LegacyRouterApp, Reply, RouterV03App, RouterV024App
from module_runner import run_module

P1 = 'http://10.0.0.11:30100'
P2 = 'http://10.0.0.21:30100'
D1 = 'http://10.0.0.12:30200'
D2 = 'http://10.0.0.13:30200'
D3 = 'http://10.0.0.14:30200'
UUID_RE = re.compile(r'^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')

SEED = [
    dict(url=P1, worker_type='prefill', bootstrap_port=8998),
    dict(url=D1, worker_type='decode'),
]
ROUTERS = [RouterV03App, RouterV024App]


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch):
    monkeypatch.setattr(_router_api, 'POLL_INTERVAL', 0.02)


def manager(server, **kwargs):
    return RouterWorkers(RouterClient(HttpClient(timeout=5), server.url), **kwargs)


def posted(app):
    return [r.json() for r in app.calls('POST')]


def deleted(app):
    return [r.path for r in app.calls('DELETE')]


# ----------------------------------------------------------------- parsing
@pytest.mark.parametrize('value, expected', [
    ('prefill', ('prefill', None)),
    ('Decode', ('decode', None)),
    ('REGULAR', ('regular', None)),
    ({'Prefill': {'bootstrap_port': 8998}}, ('prefill', 8998)),
    ({'prefill': {'bootstrap_port': None}}, ('prefill', None)),
    ({'Decode': None}, ('decode', None)),
    ({'type': 'decode'}, ('decode', None)),
    (None, ('unknown', None)),
    ('weird', ('unknown', None)),
    (42, ('unknown', None)),
])
def test_parse_worker_type(value, expected):
    assert parse_worker_type(value) == expected


def test_normalise_worker_flat_0_3():
    raw = dict(id='6f0e2d9c-8a47-4b3e-a1d2-5c9e7f3b2a40', url=P1, worker_type='prefill', is_healthy=True,
               bootstrap_port=8998, load=3)
    assert normalise_worker(raw) == dict(url=P1, worker_type='prefill', is_healthy=True, bootstrap_port=8998,
                                         id='6f0e2d9c-8a47-4b3e-a1d2-5c9e7f3b2a40')


def test_normalise_worker_nested_0_2_uses_encoded_url_as_id():
    raw = dict(url=P1, worker_type={'Prefill': {'bootstrap_port': 9001}}, is_healthy=False)
    worker = normalise_worker(raw)
    assert worker['worker_type'] == 'prefill'
    assert worker['bootstrap_port'] == 9001
    assert worker['is_healthy'] is False
    assert worker['id'] == 'http%3A%2F%2F10.0.0.11%3A30100'


def test_summarise_counts_types_and_health():
    workers = [normalise_worker(w) for w in (
        dict(url=P1, worker_type='prefill', is_healthy=True),
        dict(url=D1, worker_type='decode', is_healthy=True),
        dict(url=D2, worker_type='decode', is_healthy=False),
        dict(url='http://x', worker_type='regular'),
    )]
    counts, healthy = summarise(workers)
    assert counts == dict(prefill=1, decode=2, regular=1, unknown=0, total=4)
    assert healthy == dict(prefill=1, decode=1, regular=0, unknown=0, total=2)


# ----------------------------------------------------------------- query / detection
@pytest.mark.parametrize('app_cls', ROUTERS)
def test_query_workers_api(app_cls):
    app = app_cls(workers=SEED)
    with FakeServer(app) as server:
        result = manager(server).run()
    assert result['api'] == 'workers'
    assert result['changed'] is False
    assert result['counts'] == dict(prefill=1, decode=1, regular=0, unknown=0, total=2)
    assert result['healthy_counts']['total'] == 2
    by_url = dict((w['url'], w) for w in result['workers'])
    assert by_url[P1]['worker_type'] == 'prefill'
    assert by_url[P1]['bootstrap_port'] == 8998
    assert by_url[D1]['worker_type'] == 'decode'
    assert by_url[D1]['bootstrap_port'] is None
    if app_cls is RouterV03App:
        assert all(UUID_RE.match(w['id']) for w in result['workers'])
    else:
        assert by_url[P1]['id'] == quote(P1, safe='')
    assert app.calls('POST') == [] and app.calls('DELETE') == []


def test_query_legacy_router():
    app = LegacyRouterApp(urls=[P1, D1])
    with FakeServer(app) as server:
        result = manager(server).run()
    assert result['api'] == 'legacy'
    assert result['counts'] == dict(prefill=0, decode=0, regular=0, unknown=2, total=2)
    assert [w['worker_type'] for w in result['workers']] == ['unknown', 'unknown']
    assert [r.path for r in app.requests] == ['/workers', '/list_workers']


def test_forced_workers_api_on_legacy_router_fails():
    with FakeServer(LegacyRouterApp(urls=[P1])) as server:
        with pytest.raises(RouterError) as err:
            manager(server, api='workers').run()
    assert server.url in err.value.msg
    assert 'GET /workers' in err.value.msg
    assert 'HTTP 404' in err.value.msg


def test_forced_legacy_api_reads_list_workers():
    app = RouterV03App(workers=SEED)
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, api='legacy').run()
    assert '/list_workers' in err.value.msg
    assert [r.path for r in app.requests] == ['/list_workers']


def test_unreachable_router():
    client = RouterClient(HttpClient(timeout=2), 'http://127.0.0.1:9')
    with pytest.raises(RouterError) as err:
        RouterWorkers(client).run()
    assert 'Cannot reach the router at http://127.0.0.1:9' in err.value.msg


def test_api_key_is_sent_and_required():
    app = RouterV03App(workers=SEED, api_key='k3y')
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server).run()
        assert 'HTTP 401' in err.value.msg
        result = RouterWorkers(RouterClient(HttpClient(api_key='k3y'), server.url)).run()
    assert result['counts']['total'] == 2


# ----------------------------------------------------------------- present
@pytest.mark.parametrize('app_cls', ROUTERS)
def test_present_registers_waits_and_is_idempotent(app_cls):
    app = app_cls(workers=SEED, register_after=2)
    wanted = SEED + [dict(url=D2, worker_type='decode'), dict(url=P2, worker_type='prefill', bootstrap_port=9000)]
    with FakeServer(app) as server:
        result = manager(server, state='present', workers=wanted, wait_timeout=10).run()
        assert result['changed'] is True
        assert posted(app) == [dict(url=D2, worker_type='decode'),
                               dict(url=P2, worker_type='prefill', bootstrap_port=9000)]
        # The module waited for the background registration: both are listed in the result.
        assert result['counts'] == dict(prefill=2, decode=2, regular=0, unknown=0, total=4)
        assert result['added'] == [dict(url=D2, worker_type='decode'),
                                   dict(url=P2, worker_type='prefill', bootstrap_port=9000)]
        assert result['removed'] == []
        assert len(result['diff']['before']) == 2 and len(result['diff']['after']) == 4

        second = manager(server, state='present', workers=wanted, wait_timeout=10).run()
    assert second['changed'] is False
    assert second['added'] == [] and second['removed'] == []
    assert second['diff']['before'] == second['diff']['after']
    assert len(app.calls('POST')) == 2


def test_present_check_mode_changes_nothing():
    app = RouterV03App(workers=SEED, register_after=0)
    with FakeServer(app) as server:
        result = manager(server, state='present', workers=[dict(url=D2, worker_type='decode')],
                         check_mode=True).run()
    assert result['changed'] is True
    assert result['added'] == [dict(url=D2, worker_type='decode')]
    assert app.calls('POST') == [] and app.calls('DELETE') == []
    assert app.listed() == sorted([(P1, 'prefill'), (D1, 'decode')])
    assert dict(url=D2, worker_type='decode') in result['diff']['after']


def test_present_compares_urls_without_trailing_slash():
    app = RouterV03App(workers=[dict(url=P1 + '/', worker_type='prefill', bootstrap_port=8998)])
    with FakeServer(app) as server:
        result = manager(server, state='present',
                         workers=[dict(url=P1, worker_type='prefill', bootstrap_port=8998)]).run()
    assert result['changed'] is False
    assert app.calls('POST') == []


def test_present_replaces_a_worker_registered_with_another_type():
    app = RouterV03App(workers=[dict(url=D2, worker_type='regular')], register_after=1, remove_after=1)
    with FakeServer(app) as server:
        result = manager(server, state='present', workers=[dict(url=D2, worker_type='decode')]).run()
    assert result['changed'] is True
    assert result['removed'] == [dict(url=D2, worker_type='regular')]
    assert result['added'] == [dict(url=D2, worker_type='decode')]
    assert app.listed() == [(D2, 'decode')]
    methods = [r.method for r in app.requests if r.method != 'GET']
    assert methods == ['DELETE', 'POST']


def test_present_fails_when_the_router_never_lists_the_worker():
    app = RouterV03App(workers=SEED, register_after=None)
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=0.2).run()
    assert err.value.result['changed'] is True
    assert 'not yet listed: %s (decode)' % D2 in err.value.msg
    assert 'wait_timeout' in err.value.msg


def test_present_without_waiting():
    app = RouterV03App(workers=SEED, register_after=None)
    with FakeServer(app) as server:
        result = manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=0).run()
    assert result['changed'] is True
    assert len(app.calls('POST')) == 1


def test_present_reports_a_rejected_registration():
    class Rejecting(RouterV03App):
        def route(self, request):
            if request.method == 'POST':
                return Reply(400, {'error': 'Failed to connect to worker'})
            return super().route(request)

    with FakeServer(Rejecting(workers=SEED)) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state='present', workers=[dict(url=D2, worker_type='decode')]).run()
    assert 'POST %s/workers' % server.url in err.value.msg
    assert 'expected HTTP 202, got 400' in err.value.msg
    assert 'Failed to connect to worker' in err.value.msg
    assert err.value.result['changed'] is False


def test_duplicate_urls_are_refused():
    with FakeServer(RouterV03App(workers=SEED)) as server:
        with pytest.raises(RouterError, match='listed twice'):
            manager(server, state='present', workers=[dict(url=D2, worker_type='decode'),
                                                      dict(url=D2 + '/', worker_type='decode')]).run()


# ----------------------------------------------------------------- absent / exact
@pytest.mark.parametrize('app_cls', ROUTERS)
def test_absent_deletes_by_id_and_is_idempotent(app_cls):
    app = app_cls(workers=SEED + [dict(url=D2, worker_type='decode')], remove_after=1)
    with FakeServer(app) as server:
        if app_cls is RouterV03App:
            expected_path = '/workers/' + [w['id'] for w in app.workers if w['url'] == D2][0]
        else:
            expected_path = '/workers/' + quote(D2, safe='')
        result = manager(server, state='absent', workers=[dict(url=D2, worker_type='decode')]).run()
        assert result['changed'] is True
        assert deleted(app) == [expected_path]
        assert result['removed'] == [dict(url=D2, worker_type='decode')]
        assert result['counts']['total'] == 2
        assert app.listed() == sorted([(P1, 'prefill'), (D1, 'decode')])

        second = manager(server, state='absent', workers=[dict(url=D2, worker_type='decode')]).run()
    assert second['changed'] is False
    assert len(app.calls('DELETE')) == 1


@pytest.mark.parametrize('app_cls', ROUTERS)
def test_exact_adds_and_removes(app_cls):
    app = app_cls(workers=SEED + [dict(url=D2, worker_type='decode')], register_after=1, remove_after=1)
    wanted = [dict(url=P1, worker_type='prefill', bootstrap_port=8998), dict(url=D3, worker_type='decode')]
    with FakeServer(app) as server:
        check = manager(server, state='exact', workers=wanted, check_mode=True).run()
        assert check['changed'] is True and app.calls('POST') == [] and app.calls('DELETE') == []
        result = manager(server, state='exact', workers=wanted).run()
        again = manager(server, state='exact', workers=wanted).run()
        check_again = manager(server, state='exact', workers=wanted, check_mode=True).run()
    for res in (check, result):
        assert res['added'] == [dict(url=D3, worker_type='decode')]
        assert res['removed'] == [dict(url=D1, worker_type='decode'), dict(url=D2, worker_type='decode')]
    assert result['changed'] is True
    assert app.listed() == sorted([(P1, 'prefill'), (D3, 'decode')])
    assert result['counts'] == dict(prefill=1, decode=1, regular=0, unknown=0, total=2)
    assert again['changed'] is False and check_again['changed'] is False
    assert len(app.calls('POST')) == 1 and len(app.calls('DELETE')) == 2


@pytest.mark.parametrize('state', ['present', 'absent', 'exact'])
def test_legacy_router_refuses_changes(state):
    app = LegacyRouterApp(urls=[P1, D1])
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state=state, workers=[dict(url=D2, worker_type='decode')]).run()
    assert err.value.result['api'] == 'legacy'
    assert 'not supported on routers 0.1.x' in err.value.msg
    assert 'Restart the router' in err.value.msg
    assert [r.method for r in app.requests] == ['GET', 'GET']


# ----------------------------------------------------------------- module end to end
def test_module_query():
    app = RouterV024App(workers=SEED)
    with FakeServer(app) as server:
        result = run_module(sglang_router_workers, dict(url=server.url + '/'))
    assert result['changed'] is False
    assert result['api'] == 'workers'
    assert result['counts']['total'] == 2
    assert 'added' not in result


@pytest.mark.parametrize('app_cls', ROUTERS)
def test_module_check_apply_check_apply(app_cls):
    """community.docker style: check, apply, check, apply; then the same for absent."""
    app = app_cls(workers=SEED, register_after=1, remove_after=1)
    with FakeServer(app) as server:
        present = dict(url=server.url, state='present', api_key='router-secret',
                       workers=[dict(url=D2, worker_type='decode')])
        runs = [run_module(sglang_router_workers, present, check_mode=True, diff=True),
                run_module(sglang_router_workers, present, diff=True),
                run_module(sglang_router_workers, present, check_mode=True),
                run_module(sglang_router_workers, present)]
        assert [r['changed'] for r in runs] == [True, True, False, False]
        assert all(not r.get('failed') for r in runs), runs
        assert len(app.calls('POST')) == 1
        assert runs[0]['diff'] == runs[1]['diff']
        assert runs[1]['counts']['decode'] == 2

        absent = dict(present, state='absent')
        runs = [run_module(sglang_router_workers, absent, check_mode=True),
                run_module(sglang_router_workers, absent),
                run_module(sglang_router_workers, absent, check_mode=True),
                run_module(sglang_router_workers, absent)]
        assert [r['changed'] for r in runs] == [True, True, False, False]
        assert len(app.calls('DELETE')) == 1
        assert runs[1]['counts']['decode'] == 1
    assert app.listed() == sorted([(P1, 'prefill'), (D1, 'decode')])


def test_module_legacy_failure_returns_api():
    with FakeServer(LegacyRouterApp(urls=[P1, D1])) as server:
        result = run_module(sglang_router_workers, dict(url=server.url, state='present',
                                                        workers=[dict(url=D2, worker_type='decode')]))
    assert result['failed'] is True
    assert result['api'] == 'legacy'
    assert result['changed'] is False
    assert '0.1.x' in result['msg']


@pytest.mark.parametrize('args, message', [
    (dict(state='present'), 'workers'),
    (dict(state='exact'), 'workers'),
    (dict(state='present', workers=[dict(url=D2)]), 'worker_type'),
    (dict(state='present', workers=[dict(url=D2, worker_type='mixed')]), 'worker_type'),
    (dict(api='v9'), 'api'),
])
def test_module_argument_validation(args, message):
    result = run_module(sglang_router_workers, dict(url='http://127.0.0.1:9', **args))
    assert result['failed'] is True
    assert message in result['msg']


# ----------------------------------------------------------------- circuit breakers (metrics_url)
# What sglang-router 0.3.2 exports on its Prometheus port (captured from the stand-in fleet).
ROUTER_METRICS = '''# TYPE smg_worker_cb_state gauge
smg_worker_cb_state{worker="http://10.0.0.11:30100"} 0
smg_worker_cb_state{worker="http://10.0.0.12:30200"} 1
smg_worker_cb_state{worker="http://10.0.0.14:30200"} -1
# TYPE smg_worker_health gauge
smg_worker_health{worker="http://10.0.0.12:30200"} 1
'''


class MetricsApp(App):
    """A router's Prometheus endpoint: GET /metrics answers TEXT."""

    def __init__(self, text, status=200, **kwargs):
        super().__init__(**kwargs)
        self.text, self.status = text, status

    def route(self, request):
        if request.method == 'GET' and request.path == '/metrics':
            return Reply(self.status, self.text, content_type='text/plain; version=0.0.4')
        return Reply(404, 'Not Found', content_type='text/plain')


def test_circuit_breakers_are_read_from_the_router_metrics():
    assert _router_api.circuit_breakers(ROUTER_METRICS) == {P1: 'closed', D1: 'open', D3: 'removed'}
    assert _router_api.circuit_breakers('smg_worker_cb_state{worker="http://x:1/"} 2\n') == {'http://x:1': 'half_open'}
    assert _router_api.circuit_breakers('# nothing exported\n') == {}


def test_module_adds_each_workers_circuit_breaker():
    with FakeServer(RouterV03App(workers=SEED + [dict(url=D2, worker_type='decode')])) as router, \
            FakeServer(MetricsApp(ROUTER_METRICS)) as metrics:
        result = run_module(sglang_router_workers, dict(url=router.url, metrics_url=metrics.url))
    states = dict((w['url'], w['circuit_breaker']) for w in result['workers'])
    assert states == {P1: 'closed', D1: 'open', D2: 'unknown'}
    assert result['open_circuits'] == [D1]


def test_module_fails_when_the_metrics_cannot_be_read():
    with FakeServer(RouterV03App(workers=SEED)) as router, FakeServer(MetricsApp('', status=404)) as metrics:
        result = run_module(sglang_router_workers, dict(url=router.url, metrics_url=metrics.url))
    assert result['failed'] is True
    assert result['msg'] == "The router's metrics at %s/metrics answered HTTP 404" % metrics.url
