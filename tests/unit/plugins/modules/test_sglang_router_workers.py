# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _router_api
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HttpClient, HttpResponse
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._router_api import (
    RouterClient,
    RouterError,
    RouterWorkers,
    normalise_worker,
    parse_worker_type,
    registration_id,
    summarise,
)
from ansible_collections.mindverse.sglang_pd.plugins.modules import sglang_router_workers
from fake_sglang import no_proxy_env  # noqa: F401  pylint: disable=unused-import
from fake_sglang import (
    App,
    FakeServer,
    LegacyRouterApp,
    Reply,
    RouterV03App,
    RouterV024App,
    RouterV032JobsApp,
    SmgRouterApp,
)
from module_runner import run_module, run_module_stdout

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


def test_the_worker_api_key_goes_with_each_registration_and_nowhere_else():
    app = RouterV03App(workers=SEED, api_key='admin-k3y')
    with FakeServer(app) as server:
        client = RouterClient(HttpClient(timeout=5, api_key='admin-k3y'), server.url, worker_api_key='w0rker-k3y')
        result = RouterWorkers(client, state='present', workers=SEED + [dict(url=D2, worker_type='decode')],
                               wait_timeout=10).run()
    assert posted(app) == [dict(url=D2, worker_type='decode', api_key='w0rker-k3y')]
    assert 'w0rker-k3y' not in repr(result)


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
    assert result['msg'] == "The router's metrics at %s/metrics answered HTTP 404 [SGLPD-RTR-001]" % metrics.url


# ----------------------------------------------------------------- SMG: registrations followed by their id
ADMIN_KEY = 'ADMIN-S3CRET'
USER_KEY = 'USER-S3CRET'
CONTROL_PLANE_KEYS = {ADMIN_KEY: 'admin', USER_KEY: 'user'}


def followed(app):
    """The ids the module read with GET /workers/{id}, in order, each once."""
    ids = []
    for request in app.calls('GET'):
        worker_id = request.path[len('/workers/'):] if request.path.startswith('/workers/') else None
        if worker_id and worker_id not in ids:
            ids.append(worker_id)
    return ids


@pytest.mark.parametrize('answer, expected', [
    (HttpResponse('POST', 'u', 202, b'{"status": "accepted", "worker_id": "01a238d8-062b-7097-b84a-66a160ee6aef", '
                                    b'"location": "/workers/01a238d8-062b-7097-b84a-66a160ee6aef"}'),
     '01a238d8-062b-7097-b84a-66a160ee6aef'),
    (HttpResponse('POST', 'u', 409, b'{"error": "Worker creation already in progress for URL \'http://h:1\' with ID '
                                    b'01a238d8-238c-75df-b713-2af8caa67220. Poll GET /workers/01a238d8-238c-75df-b713-'
                                    b'2af8caa67220.", "code": "WORKER_CREATE_IN_PROGRESS"}'),
     '01a238d8-238c-75df-b713-2af8caa67220'),
    # sglang-router 0.3.x/0.2.4 as the fakes above answer: no location, nothing to follow.
    (HttpResponse('POST', 'u', 202, b'{"status": "accepted", "worker_id": "http://h:1"}'), None),
    (HttpResponse('POST', 'u', 409, b'{"error": "Worker already exists at URL \'http://h:1\' with ID '
                                    b'01a238d8-062b-7097-b84a-66a160ee6aef.", "code": "WORKER_ALREADY_EXISTS"}'), None),
    (HttpResponse('POST', 'u', 202, b'accepted'), None),
])
def test_registration_id_is_read_from_the_answer(answer, expected):
    assert registration_id(answer) == expected


def test_smg_registration_is_followed_by_its_id_until_listed():
    app = SmgRouterApp(workers=SEED, register_after=3)
    with FakeServer(app) as server:
        result = manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=10).run()
    assert result['changed'] is True
    assert app.listed() == sorted([(P1, 'prefill'), (D1, 'decode'), (D2, 'decode')])
    assert followed(app) == [app.registered(D2)['id']]
    assert result['counts']['decode'] == 2
    assert result['pending'] == [] and result['registration_failures'] == []


def test_smg_registration_that_fails_is_reported_with_the_routers_answer_not_as_a_timeout():
    app = SmgRouterApp(workers=SEED, unreachable={D2}, register_after=2)
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=60).run()
    worker_id = followed(app)[0]
    msg = err.value.msg
    assert 'accepted the registration of %s but it ended without a worker' % D2 in msg
    assert '%s (decode, id %s): GET %s/workers/%s answered HTTP 404' % (D2, worker_id, server.url, worker_id) in msg
    assert 'WORKER_NOT_FOUND' in msg and 'Failed job: type=AddWorker' in msg
    assert 'wait_timeout' not in msg
    assert len(app.calls('GET')) < 10  # it stopped when the registration ended, long before wait_timeout
    failures = err.value.result['registration_failures']
    assert [(f['url'], f['worker_type'], f['id']) for f in failures] == [(D2, 'decode', worker_id)]
    assert 'HTTP 404' in failures[0]['reason']
    assert err.value.result['changed'] is True
    assert err.value.result['pending'] == []


def test_a_failed_registration_is_reported_with_the_routers_reason():
    app = RouterV032JobsApp(workers=SEED, unreachable={D2}, register_after=2)
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=60).run()
    reason = app.registrations[followed(app)[0]]['job_status']['message']
    assert reason.startswith('Workflow failed at step detect_connection_mode')
    assert err.value.result['registration_failures'][0]['reason'] == reason
    assert reason in err.value.msg
    assert 'wait_timeout' not in err.value.msg


def test_smg_registration_in_progress_is_followed_as_pending_then_listed():
    app = SmgRouterApp(workers=SEED, registering=[dict(url=D2, worker_type='decode')], register_after=4)
    running_id = app.registration_id(D2)
    with FakeServer(app) as server:
        result = manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=10).run()
        again = manager(server, state='present', workers=[dict(url=D2, worker_type='decode')]).run()
    # The POST answered 409 WORKER_CREATE_IN_PROGRESS: the module followed that registration.
    assert posted(app) == [dict(url=D2, worker_type='decode')]
    assert followed(app) == [running_id]
    assert app.registered(D2)['id'] == running_id
    assert result['counts']['decode'] == 2 and result['registration_failures'] == []
    assert again['changed'] is False


def test_smg_registration_still_running_at_wait_timeout_is_returned_as_pending():
    app = SmgRouterApp(workers=SEED, unreachable={D2}, register_after=None)
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=0.3).run()
    worker_id = app.registration_id(D2)
    assert 'did not report it within wait_timeout=0.3 s' in err.value.msg
    assert 'not yet listed: %s (decode, id %s, job AddWorker processing since ' % (D2, worker_id) in err.value.msg
    assert '--worker-startup-timeout-secs' in err.value.msg
    [pending] = err.value.result['pending']
    assert (pending['url'], pending['worker_type'], pending['id']) == (D2, 'decode', worker_id)
    assert pending['job_status']['status'] == 'processing'
    assert err.value.result['registration_failures'] == []


# ----------------------------------------------------------------- SMG: removing a registration still running
def without_job_status(pending):
    return [dict((k, v) for k, v in p.items() if k != 'job_status') for p in pending]


def test_smg_pending_worker_is_removed_once_its_registration_ends():
    """present without waiting returns the registration's id; absent with it removes the worker."""
    app = SmgRouterApp(workers=SEED, register_after=4, remove_after=1)
    with FakeServer(app) as server:
        started = manager(server, state='present', workers=[dict(url=D2, worker_type='decode')], wait_timeout=0).run()
        assert app.registered(D2) is None and app.registration_id(D2) is not None
        to_remove = without_job_status(started['pending'])
        check = manager(server, state='absent', workers=to_remove, check_mode=True).run()
        result = manager(server, state='absent', workers=to_remove, wait_timeout=10).run()
    worker_id = started['pending'][0]['id']
    assert started['pending'][0]['job_status']['job_type'] == 'AddWorker'
    assert check['changed'] is True and check['removed'] == [dict(url=D2, worker_type='decode')]
    assert [p['id'] for p in check['pending']] == [worker_id]
    assert result['changed'] is True
    assert result['removed'] == [dict(url=D2, worker_type='decode')]
    # One DELETE, sent once the registration had ended (a DELETE before fails on SMG and would leave it registered).
    assert deleted(app) == ['/workers/%s' % worker_id]
    assert app.listed() == sorted([(P1, 'prefill'), (D1, 'decode')])
    assert result['counts']['total'] == 2 and result['pending'] == []


def test_smg_pending_registration_that_fails_needs_no_removal():
    app = SmgRouterApp(workers=SEED, registering=[dict(url=D2, worker_type='decode')], unreachable={D2},
                       register_after=3)
    to_remove = [dict(url=D2, worker_type='decode', id=app.registration_id(D2))]
    with FakeServer(app) as server:
        result = manager(server, state='absent', workers=to_remove, wait_timeout=10).run()
    assert deleted(app) == []
    assert result['changed'] is False
    assert app.listed() == sorted([(P1, 'prefill'), (D1, 'decode')])


def test_smg_pending_worker_still_registering_at_wait_timeout_is_not_deleted():
    app = SmgRouterApp(workers=SEED, registering=[dict(url=D2, worker_type='decode')], register_after=None)
    worker_id = app.registration_id(D2)
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state='absent', workers=[dict(url=D2, worker_type='decode', id=worker_id)],
                    wait_timeout=0.3).run()
    assert 'is still registering %s (decode, id %s, job AddWorker processing' % (D2, worker_id) in err.value.msg
    assert 'cannot be removed yet' in err.value.msg
    assert deleted(app) == []
    assert [p['id'] for p in err.value.result['pending']] == [worker_id]
    assert err.value.result['changed'] is False


def test_absent_with_an_unknown_id_changes_nothing():
    app = SmgRouterApp(workers=SEED)
    with FakeServer(app) as server:
        result = manager(server, state='absent',
                         workers=[dict(url=D2, worker_type='decode', id='01a238d8-0000-7000-8000-000000000000')]).run()
    assert result['changed'] is False and result['removed'] == []
    assert deleted(app) == []


def test_absent_with_the_id_of_another_worker_fails():
    app = SmgRouterApp(workers=SEED, registering=[dict(url=D3, worker_type='decode')], register_after=None)
    with FakeServer(app) as server:
        with pytest.raises(RouterError) as err:
            manager(server, state='absent',
                    workers=[dict(url=D2, worker_type='decode', id=app.registration_id(D3))]).run()
    assert 'names the worker %s, not %s' % (D3, D2) in err.value.msg
    assert deleted(app) == []


# ----------------------------------------------------------------- SMG: control-plane keys
@pytest.mark.parametrize('state', ['present', 'absent'])
def test_smg_change_with_a_key_without_the_admin_role_fails_plainly(state, capsys):
    app = SmgRouterApp(workers=SEED + [dict(url=D2, worker_type='decode')], control_plane_keys=CONTROL_PLANE_KEYS)
    with FakeServer(app) as server:
        args = dict(url=server.url, api_key=USER_KEY, state=state, workers=[dict(url=D3 if state == 'present' else D2,
                                                                                 worker_type='decode')])
        result = run_module(sglang_router_workers, args)
        printed = run_module_stdout(sglang_router_workers, args, capsys)
    assert result['failed'] is True and result['changed'] is False
    assert 'the router answered HTTP 403 (Admin role required for this control plane operation)' in result['msg']
    assert 'needs an api_key with the admin role' in result['msg']
    assert '--control-plane-api-keys' in result['msg']
    assert USER_KEY not in json.dumps(result) and USER_KEY not in json.dumps(printed)
    assert printed['msg'] == result['msg']
    assert app.listed() == sorted([(P1, 'prefill'), (D1, 'decode'), (D2, 'decode')])


def test_smg_admin_key_changes_workers():
    app = SmgRouterApp(workers=SEED, control_plane_keys=CONTROL_PLANE_KEYS)
    with FakeServer(app) as server:
        result = run_module(sglang_router_workers, dict(url=server.url, api_key=ADMIN_KEY, state='present',
                                                        workers=[dict(url=D2, worker_type='decode')]))
    assert not result.get('failed'), result['msg']
    assert result['changed'] is True and result['counts']['decode'] == 2


@pytest.mark.parametrize('api_key, expected', [
    (None, 'HTTP 401 (Missing or invalid Authorization header): it needs an api_key'),
    ('wrong-key', 'HTTP 401 (Invalid authentication token): it does not accept the api_key given'),
])
def test_smg_read_without_a_valid_key_fails_plainly(api_key, expected):
    app = SmgRouterApp(workers=SEED, control_plane_keys=CONTROL_PLANE_KEYS)
    with FakeServer(app) as server:
        result = run_module(sglang_router_workers, dict(url=server.url, api_key=api_key))
    assert result['failed'] is True
    assert result['msg'].startswith('GET %s/workers: the router answered ' % server.url)
    assert expected in result['msg']
    assert 'wrong-key' not in result['msg']
