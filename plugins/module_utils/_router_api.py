# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Client for the sglang-router worker API (private: the API may change).

Two API generations are handled:

* ``workers`` (routers >= 0.2): ``GET /workers``, ``POST /workers`` (202, the
  registration finishes in the background) and ``DELETE /workers/{id}``, where
  ``id`` is a UUID on 0.3.x and the percent-encoded worker URL on 0.2.4.
* ``legacy`` (routers 0.1.x): ``GET /list_workers`` only; PD workers cannot be
  registered at run time there.
"""

from __future__ import annotations

import time
from urllib.parse import quote

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import (
    HttpClient,
    HttpRequestError,
    join_url,
    normalise_url,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._prometheus import samples

API_WORKERS = 'workers'
API_LEGACY = 'legacy'
WORKER_TYPES = ('prefill', 'decode', 'regular')
UNKNOWN = 'unknown'
# Seconds between two GET /workers while waiting for the router to report a change.
POLL_INTERVAL = 1.0
# The router's per-worker circuit-breaker gauge on its Prometheus port, and its values
# (sglang-router 0.3.x, "smg" metrics: 0 closed, 1 open, 2 half-open; -1 once removed).
CB_STATE_METRIC = 'smg_worker_cb_state'
CB_STATES = {0: 'closed', 1: 'open', 2: 'half_open', -1: 'removed'}


class RouterError(Exception):
    """A failure with a message for the user and the return values known so far."""

    def __init__(self, msg, **result):
        super().__init__(msg)
        self.msg = msg
        self.result = result


def parse_worker_type(value):
    """Return ``(worker_type, bootstrap_port)`` from the forms routers use.

    ``"prefill"``, ``"Prefill"``, ``{"Prefill": {"bootstrap_port": 8998}}``,
    ``{"Decode": null}`` all work; anything else gives ``"unknown"``.
    """
    port = None
    if isinstance(value, dict):
        for key, inner in value.items():
            if str(key).strip().lower() in WORKER_TYPES:
                if isinstance(inner, dict):
                    port = inner.get('bootstrap_port')
                value = key
                break
        else:
            value = value.get('type') or value.get('worker_type')
    if isinstance(value, str) and value.strip().lower() in WORKER_TYPES:
        return value.strip().lower(), port
    return UNKNOWN, port


def _to_port(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def normalise_worker(raw):
    """One entry of ``GET /workers`` as ``{url, worker_type, is_healthy, bootstrap_port, id}``."""
    if isinstance(raw, str):
        raw = {'url': raw}
    url = raw.get('url') or ''
    worker_type, nested_port = parse_worker_type(raw.get('worker_type', raw.get('type')))
    port = raw.get('bootstrap_port')
    if port is None:
        port = nested_port
    healthy = raw.get('is_healthy', raw.get('healthy'))
    worker_id = raw.get('id')
    if worker_id in (None, ''):
        # 0.2.4 identifies a worker by its percent-encoded URL.
        worker_id = quote(url, safe='')
    return dict(
        url=url,
        worker_type=worker_type,
        is_healthy=healthy if isinstance(healthy, bool) else None,
        bootstrap_port=_to_port(port),
        id=str(worker_id),
    )


def circuit_breakers(text):
    """``{worker URL: state}`` from a router's metrics TEXT (``closed``, ``open``, ``half_open``, ``removed``)."""
    states = {}
    for _name, labels, value in samples(text, [CB_STATE_METRIC]):
        try:
            code = int(float(value))
        except ValueError:
            code = None
        if labels.get('worker'):
            states[normalise_url(labels['worker'])] = CB_STATES.get(code, UNKNOWN)
    return states


def with_circuit_breakers(workers, states):
    """WORKERS, each with ``circuit_breaker``: its state in STATES, or ``unknown`` when not exported."""
    return [dict(w, circuit_breaker=states.get(normalise_url(w['url']), UNKNOWN)) for w in workers]


def summarise(workers):
    """Return ``(counts, healthy_counts)`` keyed by worker type plus ``total``."""
    keys = WORKER_TYPES + (UNKNOWN,)
    counts = dict((k, 0) for k in keys)
    healthy = dict((k, 0) for k in keys)
    for worker in workers:
        wtype = worker['worker_type'] if worker['worker_type'] in counts else UNKNOWN
        counts[wtype] += 1
        if worker.get('is_healthy'):
            healthy[wtype] += 1
    counts['total'] = len(workers)
    healthy['total'] = sum(healthy[k] for k in keys)
    return counts, healthy


def worker_view(worker):
    """The part of a worker shown in ``diff``, ``added`` and ``removed``."""
    view = dict(url=normalise_url(worker['url']), worker_type=worker['worker_type'])
    if worker.get('bootstrap_port') is not None:
        view['bootstrap_port'] = worker['bootstrap_port']
    return view


def _sorted_views(workers):
    return sorted((worker_view(w) for w in workers), key=lambda v: (v['url'], v['worker_type']))


class RouterClient:
    """Talks to one router; knows both API generations."""

    def __init__(self, http, base_url):
        self.http = http
        self.base_url = normalise_url(base_url)

    def url(self, path):
        return join_url(self.base_url, path)

    def _get_json(self, path):
        """``(response, data)``; ``data`` is None when the body is not JSON."""
        resp = self.http.request('GET', self.url(path))
        try:
            data = resp.json()
        except ValueError:
            data = None
        return resp, data

    def detect(self, api='auto'):
        """Return ``(api, workers)`` where ``workers`` is the normalised list."""
        findings = []
        try:
            if api in ('auto', API_WORKERS):
                resp, data = self._get_json('/workers')
                if resp.status == 200 and isinstance(data, dict) and isinstance(data.get('workers'), list):
                    return API_WORKERS, [normalise_worker(w) for w in data['workers'] if isinstance(w, (dict, str))]
                findings.append('GET %s answered HTTP %s with %r' % (resp.url, resp.status, resp.excerpt(200)))
            if api in ('auto', API_LEGACY):
                resp, data = self._get_json('/list_workers')
                if resp.status == 200 and isinstance(data, dict) and isinstance(data.get('urls'), list):
                    return API_LEGACY, [dict(url=u, worker_type=UNKNOWN, is_healthy=None, bootstrap_port=None, id=None)
                                        for u in data['urls'] if isinstance(u, str)]
                findings.append('GET %s answered HTTP %s with %r' % (resp.url, resp.status, resp.excerpt(200)))
        except HttpRequestError as exc:
            raise RouterError('Cannot reach the router at %s: %s. Expected an sglang-router answering %s; '
                              'check the URL, the port and that the router is running.'
                              % (self.base_url, exc, self._expected(api)))
        raise RouterError('The service at %s does not look like an sglang-router (api=%s): expected %s, but %s.'
                          % (self.base_url, api, self._expected(api), '; '.join(findings)))

    @staticmethod
    def _expected(api):
        wanted = []
        if api in ('auto', API_WORKERS):
            wanted.append('GET /workers with a JSON "workers" list (routers >= 0.2)')
        if api in ('auto', API_LEGACY):
            wanted.append('GET /list_workers with a JSON "urls" list (routers 0.1.x)')
        return ' or '.join(wanted)

    def list_workers(self, api):
        return self.detect(api)[1]

    def add_worker(self, spec):
        body = dict(url=spec['url'], worker_type=spec['worker_type'])
        if spec.get('bootstrap_port') is not None:
            body['bootstrap_port'] = spec['bootstrap_port']
        return self.http.request('POST', self.url('/workers'), body=body)

    def remove_worker(self, worker):
        worker_id = worker.get('id') or quote(worker['url'], safe='')
        return self.http.request('DELETE', self.url('/workers/%s' % quote(worker_id, safe='%')))


class RouterWorkers:
    """Query or converge the router's worker list."""

    def __init__(self, client, state='query', workers=None, wait_timeout=120.0, check_mode=False, api='auto',
                 poll_interval=None, clock=time.monotonic, sleep=time.sleep):
        self.client = client
        self.state = state
        self.desired = workers or []
        self.wait_timeout = float(wait_timeout)
        self.check_mode = check_mode
        self.api = api
        self.poll_interval = POLL_INTERVAL if poll_interval is None else poll_interval
        self.clock = clock
        self.sleep = sleep

    # -- desired state ---------------------------------------------------
    def _validated_desired(self):
        seen = {}
        result = []
        for index, item in enumerate(self.desired):
            url = normalise_url(item.get('url') or '')
            if not url:
                raise RouterError('workers[%d]: expected a non-empty url, found %r.' % (index, item.get('url')))
            if url in seen:
                raise RouterError('workers[%d]: %s is listed twice (also workers[%d]); list each worker once.'
                                  % (index, url, seen[url]))
            seen[url] = index
            wtype = item.get('worker_type')
            if wtype not in WORKER_TYPES:
                raise RouterError('workers[%d] (%s): expected worker_type one of %s, found %r.'
                                  % (index, url, ', '.join(WORKER_TYPES), wtype))
            port = item.get('bootstrap_port')
            result.append(dict(url=url, worker_type=wtype,
                               bootstrap_port=port if wtype == 'prefill' else None))
        return result

    @staticmethod
    def _differs(current, wanted):
        if current['worker_type'] in WORKER_TYPES and current['worker_type'] != wanted['worker_type']:
            return True
        return (wanted['worker_type'] == 'prefill' and wanted['bootstrap_port'] is not None
                and current['bootstrap_port'] is not None and current['bootstrap_port'] != wanted['bootstrap_port'])

    def plan(self, current, desired):
        """Return ``(to_remove, to_add)``: current entries to delete, specs to register."""
        by_url = dict((normalise_url(w['url']), w) for w in current)
        to_remove, to_add = [], []
        if self.state in ('present', 'exact'):
            for wanted in desired:
                existing = by_url.get(wanted['url'])
                if existing is None:
                    to_add.append(wanted)
                elif self._differs(existing, wanted):
                    # Registered with another type or bootstrap port: replace it.
                    to_remove.append(existing)
                    to_add.append(wanted)
        if self.state == 'exact':
            wanted_urls = set(w['url'] for w in desired)
            to_remove.extend(w for w in current if normalise_url(w['url']) not in wanted_urls)
        if self.state == 'absent':
            for wanted in desired:
                if wanted['url'] in by_url:
                    to_remove.append(by_url[wanted['url']])
        return to_remove, to_add

    # -- main ------------------------------------------------------------
    def run(self):
        api, current = self.client.detect(self.api)
        counts, healthy = summarise(current)
        result = dict(changed=False, api=api, workers=current, counts=counts, healthy_counts=healthy)
        if self.state == 'query':
            return result
        if api == API_LEGACY:
            raise RouterError(
                'The router at %s speaks the 0.1.x API (GET /list_workers, no GET /workers): run-time PD '
                'registration is not supported on routers 0.1.x, so state=%s cannot be applied. Restart the '
                'router with a re-rendered command line (--prefill/--decode) that lists the wanted workers.'
                % (self.client.base_url, self.state), **result)

        desired = self._validated_desired()
        to_remove, to_add = self.plan(current, desired)
        removed_views = _sorted_views(to_remove)
        added_views = _sorted_views(to_add)
        removed_urls = set(normalise_url(w['url']) for w in to_remove)
        after = [w for w in current if normalise_url(w['url']) not in removed_urls] + list(to_add)
        result.update(
            changed=bool(to_remove or to_add),
            added=added_views,
            removed=removed_views,
            diff=dict(before=_sorted_views(current), after=_sorted_views(after)),
        )
        if not result['changed'] or self.check_mode:
            return result

        try:
            final = self._apply(to_remove, to_add, removed_urls, result)
        except HttpRequestError as exc:
            raise RouterError('%s. The router stopped answering while applying the change; re-run the task to '
                              'converge.' % exc, **result)
        result['changed'] = True
        result['workers'] = final
        result['counts'], result['healthy_counts'] = summarise(final)
        return result

    def _apply(self, to_remove, to_add, removed_urls, result):
        """DELETE, then POST, then wait; ``result['changed']`` tracks what was done so far."""
        deadline = self.clock() + self.wait_timeout
        result['changed'] = False
        for worker in to_remove:
            resp = self.client.remove_worker(worker)
            if resp.status not in (200, 202, 204, 404):
                raise RouterError('DELETE %s (remove %s worker %s): expected HTTP 200/202/204, got %s: %s'
                                  % (resp.url, worker['worker_type'], worker['url'], resp.status, resp.excerpt()),
                                  **result)
            result['changed'] = True
        if to_remove and to_add:
            # A worker being replaced must be gone before it is registered again.
            self._wait(deadline, gone=removed_urls, wanted=[], result=result)
        for spec in to_add:
            resp = self.client.add_worker(spec)
            if resp.status not in (200, 201, 202, 409):
                raise RouterError('POST %s (register %s worker %s): expected HTTP 202, got %s: %s'
                                  % (resp.url, spec['worker_type'], spec['url'], resp.status, resp.excerpt()),
                                  **result)
            result['changed'] = True
        added_urls = set(w['url'] for w in to_add)
        return self._wait(deadline, gone=removed_urls - added_urls, wanted=to_add, result=result)

    def _pending(self, workers, gone, wanted):
        by_url = dict((normalise_url(w['url']), w) for w in workers)
        missing = [w for w in wanted
                   if w['url'] not in by_url or by_url[w['url']]['worker_type'] not in (w['worker_type'], UNKNOWN)]
        still = sorted(u for u in gone if u in by_url)
        return missing, still

    def _wait(self, deadline, gone, wanted, result):
        """Poll GET /workers until the change shows; return the last list seen."""
        while True:
            try:
                workers = self.client.list_workers(API_WORKERS)
            except RouterError as exc:
                raise RouterError('%s (while waiting for the router to report the change)' % exc.msg, **result)
            missing, still = self._pending(workers, gone, wanted)
            if not missing and not still:
                return workers
            if self.wait_timeout <= 0:
                return workers
            remaining = deadline - self.clock()
            if remaining <= 0:
                problems = []
                if missing:
                    listed = ', '.join('%s (%s)' % (w['url'], w['worker_type']) for w in missing)
                    problems.append('not yet listed: %s' % listed)
                if still:
                    problems.append('still listed: %s' % ', '.join(still))
                counts, healthy = summarise(workers)
                result.update(workers=workers, counts=counts, healthy_counts=healthy)
                raise RouterError(
                    'The router at %s accepted the change but did not report it within wait_timeout=%s s: %s. '
                    'Check the router log (a worker that fails its health check is not listed) or raise wait_timeout.'
                    % (self.client.base_url, self.wait_timeout, '; '.join(problems)), **result)
            self.sleep(min(self.poll_interval, remaining))


def read_circuit_breakers(http, metrics_url):
    """The circuit-breaker states on the router's Prometheus endpoint METRICS_URL, or raise ``RouterError``."""
    url = join_url(metrics_url, '/metrics')
    try:
        resp = http.request('GET', url)
    except HttpRequestError as exc:
        raise RouterError('Cannot read the router\'s metrics at %s: %s' % (url, exc))
    if resp.status != 200:
        raise RouterError('The router\'s metrics at %s answered HTTP %s' % (url, resp.status))
    return circuit_breakers(resp.text)


def run_router_workers_module(module):
    """Entry point of the sglang_router_workers module."""
    p = module.params
    http = HttpClient(timeout=p['timeout'], validate_certs=p['validate_certs'], api_key=p['api_key'])
    manager = RouterWorkers(RouterClient(http, p['url']), state=p['state'], workers=p['workers'],
                            wait_timeout=p['wait_timeout'], check_mode=module.check_mode, api=p['api'])
    try:
        result = manager.run()
        if p.get('metrics_url'):
            states = read_circuit_breakers(HttpClient(timeout=p['timeout'], validate_certs=p['validate_certs']),
                                           p['metrics_url'])
            result['workers'] = with_circuit_breakers(result['workers'], states)
            result['open_circuits'] = sorted(w['url'] for w in result['workers']
                                             if w['circuit_breaker'] in ('open', 'half_open'))
    except RouterError as exc:
        result = dict(exc.result)
        result.setdefault('changed', False)
        module.fail_json(msg=exc.msg, **result)
    module.exit_json(**result)
