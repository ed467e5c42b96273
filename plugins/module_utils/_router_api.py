# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Client for the sglang-router worker API (private: the API may change).

Two API generations are handled:

* ``workers`` (routers >= 0.2): ``GET /workers``, ``POST /workers`` (202, the
  registration finishes in the background) and ``DELETE /workers/{id}``, where
  ``id`` is a UUID on 0.3.x and SMG and the percent-encoded worker URL on 0.2.4.
* ``legacy`` (routers 0.1.x): ``GET /list_workers`` only; PD workers cannot be
  registered at run time there.

SMG (the ``smg`` package, successor of sglang-router) and sglang-router 0.3.2 name the
id of an accepted registration (``worker_id`` and ``location`` in the 202 answer) and
show its background job on ``GET /workers/{id}`` (``job_status``), which is how a
registration that does not finish is told from one that is still running. What SMG
1.13.0 answers was read from the real router (tests/integration/test_smg_router.py,
and the docstring of ``SmgRouterApp`` in tests/unit/fake_sglang.py).
"""

from __future__ import annotations

import re
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
# Seconds between two GET /workers while waiting for the router to report a change: a short,
# cheap read, so a registered worker is seen (and serves) soon after the router lists it.
POLL_INTERVAL = 0.25
# The router's per-worker circuit-breaker gauge on its Prometheus port, and its values
# (sglang-router 0.3.x, "smg" metrics: 0 closed, 1 open, 2 half-open; -1 once removed).
CB_STATE_METRIC = 'smg_worker_cb_state'
CB_STATES = {0: 'closed', 1: 'open', 2: 'half_open', -1: 'removed'}
# SMG answers a POST of a URL whose registration still runs with HTTP 409 and this code,
# naming the id of that registration in its message.
CREATE_IN_PROGRESS = 'WORKER_CREATE_IN_PROGRESS'
ADD_WORKER_JOB = 'AddWorker'
JOB_FAILED = 'failed'
UUID_RE = re.compile(r'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}', re.IGNORECASE)
ADMIN_ROLE_HINT = ('Registering and removing workers needs an api_key with the admin role: on SMG, a key of its '
                   '--control-plane-api-keys whose role is admin (id:name:admin:key)')
PENDING_HINT = ('SMG lists a worker only once its registration has finished, and keeps probing a worker that does '
                'not answer until its --worker-startup-timeout-secs (1800 s by default); the ids of the registrations '
                'still running are in the result as pending')


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


def access_refused(resp, action, key_sent):
    """The message for a 401 or 403 answer to ACTION: what the router needs, never the key."""
    if resp.status == 403:
        return ('%s: the router answered HTTP 403 (%s). %s; the api_key given has another role.'
                % (action, resp.excerpt(200), ADMIN_ROLE_HINT))
    if key_sent:
        return '%s: the router answered HTTP 401 (%s): it does not accept the api_key given.' % (action, resp.excerpt(200))
    return ('%s: the router answered HTTP 401 (%s): it needs an api_key (its --api-key, or on SMG a key of its '
            '--control-plane-api-keys).' % (action, resp.excerpt(200)))


def json_or_none(resp):
    try:
        return resp.json()
    except ValueError:
        return None


def registration_id(resp):
    """The id to follow an accepted ``POST /workers`` by, or None when the router names none.

    SMG and sglang-router 0.3.2 answer 202 with ``worker_id`` and ``location``; SMG answers
    a POST of a URL whose registration still runs with 409 ``WORKER_CREATE_IN_PROGRESS``,
    naming that registration's id in its message.
    """
    data = json_or_none(resp)
    if not isinstance(data, dict):
        return None
    if resp.status == 202 and data.get('location') and data.get('worker_id'):
        return str(data['worker_id'])
    if resp.status == 409 and data.get('code') == CREATE_IN_PROGRESS:
        match = UUID_RE.search(str(data.get('error') or ''))
        return match.group(0) if match else None
    return None


def job_status_of(data):
    """The ``job_status`` of a ``GET /workers/{id}`` answer, or None."""
    job = data.get('job_status') if isinstance(data, dict) else None
    return job if isinstance(job, dict) else None


def describe_job(job):
    """``job AddWorker processing since 2026-12-02 22:20:18 UTC`` from a router's ``job_status``."""
    if not job:
        return 'no job status'
    text = 'job %s %s' % (job.get('job_type'), job.get('status'))
    stamp = job.get('timestamp')
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        text += time.strftime(' since %Y-%m-%d %H:%M:%S UTC', time.gmtime(stamp))
    return text


def registration_failure(resp, data):
    """Why the registration whose ``GET /workers/{id}`` answered RESP (DATA, its JSON) ended without a worker, or None."""
    if resp.status == 404:
        return ('GET %s answered HTTP 404 (%s): SMG drops the id of a registration whose job failed and writes the '
                'reason only to its own log ("Failed job: type=AddWorker, worker=<url>, error=..."); a worker it '
                'cannot reach fails so once its --worker-startup-timeout-secs has passed' % (resp.url, resp.excerpt(200)))
    job = job_status_of(data)
    if job and job.get('job_type') == ADD_WORKER_JOB and job.get('status') == JOB_FAILED:
        return str(job.get('message') or 'the job failed without a message')
    return None


class Registration:
    """A registration the router accepted and names an id for, followed with ``GET /workers/{id}``.

    ``job_status`` is the router's last ``job_status`` of it (None when it showed none);
    ``failure`` says why it ended without a worker (None while it runs or once it has a worker).
    """

    def __init__(self, spec, worker_id):
        self.spec = spec
        self.id = worker_id
        self.job_status = None
        self.failure = None

    def pending_view(self):
        return dict(worker_view(self.spec), id=self.id, job_status=self.job_status)

    def failure_view(self):
        return dict(worker_view(self.spec), id=self.id, reason=self.failure)

    def describe(self):
        return '%s (%s, id %s, %s)' % (self.spec['url'], self.spec['worker_type'], self.id, describe_job(self.job_status))


class RouterClient:
    """Talks to one router; knows both API generations."""

    def __init__(self, http, base_url, worker_api_key=None):
        self.http = http
        self.base_url = normalise_url(base_url)
        self.worker_api_key = worker_api_key

    def url(self, path):
        return join_url(self.base_url, path)

    @property
    def key_sent(self):
        """Whether the requests carry an api_key (never the key itself)."""
        return 'Authorization' in self.http.headers

    def _get_json(self, path):
        """``(response, data)``; ``data`` is None when the body is not JSON."""
        resp = self.http.request('GET', self.url(path))
        return resp, json_or_none(resp)

    def detect(self, api='auto'):
        """Return ``(api, workers)`` where ``workers`` is the normalised list."""
        findings = []
        try:
            if api in ('auto', API_WORKERS):
                resp, data = self._get_json('/workers')
                self._refuse_unauthorised(resp)
                if resp.status == 200 and isinstance(data, dict) and isinstance(data.get('workers'), list):
                    return API_WORKERS, [normalise_worker(w) for w in data['workers'] if isinstance(w, (dict, str))]
                findings.append('GET %s answered HTTP %s with %r' % (resp.url, resp.status, resp.excerpt(200)))
            if api in ('auto', API_LEGACY):
                resp, data = self._get_json('/list_workers')
                self._refuse_unauthorised(resp)
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

    def _refuse_unauthorised(self, resp):
        if resp.status in (401, 403):
            raise RouterError(access_refused(resp, 'GET %s' % resp.url, self.key_sent))

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
        if self.worker_api_key:
            body['api_key'] = self.worker_api_key
        return self.http.request('POST', self.url('/workers'), body=body)

    def get_worker(self, worker_id):
        """``(response, data)`` of ``GET /workers/{id}``: one worker, or a registration and its job."""
        return self._get_json('/workers/%s' % quote(worker_id, safe=''))

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
            result.append(dict(url=url, worker_type=wtype, bootstrap_port=port if wtype == 'prefill' else None,
                               id=item.get('id') or None))
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

    def pending_removals(self, current, desired):
        """With state=absent, the registrations still running of workers not listed but named by ``id``.

        The router lists a worker only once its registration has finished, so such a
        worker can only be found by the id the router named for it.
        """
        if self.state != 'absent':
            return []
        listed = set(normalise_url(w['url']) for w in current)
        found = []
        for wanted in desired:
            if wanted['id'] and wanted['url'] not in listed:
                registration = self._running_registration(wanted)
                if registration is not None:
                    found.append(registration)
        return found

    def _running_registration(self, spec):
        """SPEC's registration if the router is still running it (``GET /workers/{id}``), else None."""
        try:
            resp, data = self.client.get_worker(spec['id'])
        except HttpRequestError as exc:
            raise RouterError('%s (looking up the registration of %s by its id)' % (exc, spec['url']))
        action = 'GET %s (the registration of %s)' % (resp.url, spec['url'])
        if resp.status == 404:
            return None
        if resp.status in (401, 403):
            raise RouterError(access_refused(resp, action, self.client.key_sent))
        if resp.status != 200 or not isinstance(data, dict):
            raise RouterError('%s: expected HTTP 200 or 404 with a JSON worker, got %s: %s'
                              % (action, resp.status, resp.excerpt()))
        if normalise_url(data.get('url') or '') != spec['url']:
            raise RouterError('%s: id %s names the worker %s, not %s; give the id the router named for %s.'
                              % (action, spec['id'], data.get('url'), spec['url'], spec['url']))
        if registration_failure(resp, data):
            return None
        registration = Registration(spec, spec['id'])
        registration.job_status = job_status_of(data)
        return registration

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
        pending_removals = self.pending_removals(current, desired)
        removed_urls = (set(normalise_url(w['url']) for w in to_remove)
                        | set(r.spec['url'] for r in pending_removals))
        after = [w for w in current if normalise_url(w['url']) not in removed_urls] + list(to_add)
        result.update(
            changed=bool(to_remove or to_add or pending_removals),
            added=_sorted_views(to_add),
            removed=_sorted_views(to_remove + [r.spec for r in pending_removals]),
            diff=dict(before=_sorted_views(current), after=_sorted_views(after)),
            pending=[r.pending_view() for r in pending_removals],
            registration_failures=[],
        )
        if not result['changed'] or self.check_mode:
            return result

        try:
            final = self._apply(to_remove, to_add, pending_removals, removed_urls, result)
        except HttpRequestError as exc:
            raise RouterError('%s. The router stopped answering while applying the change; re-run the task to '
                              'converge.' % exc, **result)
        result['workers'] = final
        result['counts'], result['healthy_counts'] = summarise(final)
        return result

    def _apply(self, to_remove, to_add, pending_removals, removed_urls, result):
        """Settle, DELETE, then POST, then wait; ``result['changed']`` tracks what was done so far."""
        deadline = self.clock() + self.wait_timeout
        result['changed'] = False
        to_remove = list(to_remove) + self._settle(deadline, pending_removals, result)
        for worker in to_remove:
            resp = self.client.remove_worker(worker)
            self._require(resp, (200, 202, 204, 404), 'HTTP 200/202/204', result,
                          'DELETE %s (remove %s worker %s)' % (resp.url, worker['worker_type'], worker['url']))
            result['changed'] = True
        if to_remove and to_add:
            # A worker being replaced must be gone before it is registered again.
            self._wait(deadline, gone=removed_urls, wanted=[], result=result)
        registrations = []
        for spec in to_add:
            resp = self.client.add_worker(spec)
            self._require(resp, (200, 201, 202, 409), 'HTTP 202', result,
                          'POST %s (register %s worker %s)' % (resp.url, spec['worker_type'], spec['url']))
            result['changed'] = True
            worker_id = registration_id(resp)
            if worker_id:
                registrations.append(Registration(spec, worker_id))
        added_urls = set(w['url'] for w in to_add)
        return self._wait(deadline, gone=removed_urls - added_urls, wanted=to_add, result=result,
                          registrations=registrations)

    def _require(self, resp, accepted, expected, result, action):
        """Raise ``RouterError`` unless RESP, the answer to ACTION, has a status in ACCEPTED."""
        if resp.status in accepted:
            return
        if resp.status in (401, 403):
            raise RouterError(access_refused(resp, action, self.client.key_sent), **result)
        raise RouterError('%s: expected %s, got %s: %s' % (action, expected, resp.status, resp.excerpt()), **result)

    def _poll_workers(self, result):
        try:
            return self.client.list_workers(API_WORKERS)
        except RouterError as exc:
            raise RouterError('%s (while waiting for the router to report the change)' % exc.msg, **result)

    def _follow(self, registration):
        """Read REGISTRATION's job, or why it ended without a worker, from ``GET /workers/{id}``."""
        resp, data = self.client.get_worker(registration.id)
        if resp.status == 200:
            registration.job_status = job_status_of(data)
        registration.failure = registration_failure(resp, data)

    def _settle(self, deadline, registrations, result):
        """Wait until each of REGISTRATIONS has ended; return the workers they registered, to remove them.

        A worker cannot be removed while its registration runs: SMG 1.13 answers its DELETE
        with 202, but the removal job fails ("Worker <url> not found") and the registration
        goes on. So the registration is waited for, and the worker it registers removed.
        """
        running = list(registrations)
        registered = []
        while running:
            listed = dict((normalise_url(w['url']), w) for w in self._poll_workers(result))
            for registration in running:
                if registration.spec['url'] not in listed:
                    self._follow(registration)
            registered.extend(listed[r.spec['url']] for r in running if r.spec['url'] in listed)
            running = [r for r in running if r.spec['url'] not in listed and not r.failure]
            if running:
                self._pause_settling(deadline, running, result)
        return registered

    def _pause_settling(self, deadline, running, result):
        remaining = deadline - self.clock()
        if self.wait_timeout > 0 and remaining > 0:
            self.sleep(min(self.poll_interval, remaining))
            return
        result['pending'] = [r.pending_view() for r in running]
        raise RouterError(
            'The router at %s is still registering %s, so %s cannot be removed yet (waited wait_timeout=%s s): a '
            'worker cannot be removed before its registration ends (SMG answers DELETE with 202, but its removal job '
            'fails with "Worker <url> not found" and the registration goes on). Re-run once the worker answers (it '
            'is then removed) or once the router has given up on it (its --worker-startup-timeout-secs).'
            % (self.client.base_url, ', '.join(r.describe() for r in running),
               'it' if len(running) == 1 else 'they', self.wait_timeout), **result)

    def _pending(self, workers, gone, wanted):
        by_url = dict((normalise_url(w['url']), w) for w in workers)
        missing = [w for w in wanted
                   if w['url'] not in by_url or by_url[w['url']]['worker_type'] not in (w['worker_type'], UNKNOWN)]
        still = sorted(u for u in gone if u in by_url)
        return missing, still

    def _wait(self, deadline, gone, wanted, result, registrations=()):
        """Poll GET /workers until the change shows or every registration it still misses has failed.

        Returns the last list seen; raises ``RouterError`` for a failed registration or at the deadline.
        """
        followed = dict((r.spec['url'], r) for r in registrations)
        while True:
            workers = self._poll_workers(result)
            missing, still = self._pending(workers, gone, wanted)
            failed, waiting = self._split_missing(missing, followed)
            settled = not waiting and not still
            if settled or self.wait_timeout <= 0 or self.clock() >= deadline:
                return self._conclude(workers, settled, failed, waiting, still, followed, result)
            self.sleep(min(self.poll_interval, deadline - self.clock()))

    def _split_missing(self, missing, followed):
        """``(failed, waiting)``: the registrations of MISSING that ended without a worker, the specs still awaited."""
        failed, waiting = [], []
        for spec in missing:
            registration = followed.get(spec['url'])
            if registration is not None and not registration.failure:
                self._follow(registration)
            if registration is not None and registration.failure:
                failed.append(registration)
            else:
                waiting.append(spec)
        return failed, waiting

    def _conclude(self, workers, settled, failed, waiting, still, followed, result):
        """Return WORKERS when the wait ended well, else raise ``RouterError`` saying what is missing and why."""
        result.update(pending=[followed[w['url']].pending_view() for w in waiting if w['url'] in followed],
                      registration_failures=[r.failure_view() for r in failed])
        if not failed and (settled or self.wait_timeout <= 0):
            return workers
        counts, healthy = summarise(workers)
        result.update(workers=workers, counts=counts, healthy_counts=healthy)
        problems = self._problems(waiting, still, followed)
        if failed:
            raise RouterError(self._failure_message(failed, problems), **result)
        message = ('The router at %s accepted the change but did not report it within wait_timeout=%s s: %s. '
                   'Check the router log (a worker that fails its health check is not listed) or raise wait_timeout.'
                   % (self.client.base_url, self.wait_timeout, '; '.join(problems)))
        if result['pending']:
            message += ' %s.' % PENDING_HINT
        raise RouterError(message, **result)

    @staticmethod
    def _problems(waiting, still, followed):
        problems = []
        if waiting:
            problems.append('not yet listed: %s' % ', '.join(
                followed[w['url']].describe() if w['url'] in followed else '%s (%s)' % (w['url'], w['worker_type'])
                for w in waiting))
        if still:
            problems.append('still listed: %s' % ', '.join(still))
        return problems

    def _failure_message(self, failed, problems):
        message = ('The router at %s accepted the registration of %s but it ended without a worker: %s.'
                   % (self.client.base_url, ', '.join(r.spec['url'] for r in failed),
                      '; '.join('%s (%s, id %s): %s' % (r.spec['url'], r.spec['worker_type'], r.id, r.failure)
                                for r in failed)))
        if problems:
            message += ' Besides, %s.' % '; '.join(problems)
        return message + ' Check that the router reaches each worker at its URL (its /health answers), then re-run.'


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
    manager = RouterWorkers(RouterClient(http, p['url'], p.get('worker_api_key')), state=p['state'], workers=p['workers'],
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
        module.fail_json(msg=exc.msg + ' [SGLPD-RTR-001]', **result)
    module.exit_json(**result)
