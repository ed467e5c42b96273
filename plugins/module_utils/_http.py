# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""HTTP helpers shared by the sglang_pd modules (private: the API may change).

Everything goes through ``ansible.module_utils.urls.Request``; an HTTP error
status is not an exception here but a normal ``HttpResponse`` so callers can
say what they expected and what they found.
"""

from __future__ import annotations

import concurrent.futures

import http.client
import json
import time
from urllib.error import HTTPError

from ansible.module_utils.common.text.converters import to_native, to_text
from ansible.module_utils.urls import Request, make_context

# Everything that means "no usable HTTP answer": URLError, socket timeouts,
# refused or reset connections and TLS errors are OSError; a garbled status
# line or a cut body is an HTTPException; a malformed URL is a ValueError.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException, ValueError)

EXCERPT_LIMIT = 500

# The options every HTTP module takes (doc fragment mindverse.sglang_pd.http_options documents them).
HTTP_ARGUMENT_SPEC = {
    "api_key": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "default": True},
}


# URLs of one sglang_health call polled at the same time (each a thread; most of its time is waiting).
HEALTH_THREADS = 32


class HttpRequestError(Exception):
    """The request got no HTTP answer (connection refused, timeout, TLS, DNS, ...)."""

    def __init__(self, method, url, reason, refused=False):
        self.method = method
        self.url = url
        self.reason = reason
        # Nothing listens there (the connection was refused), as opposed to no answer in time.
        self.refused = refused
        super().__init__('%s %s failed: %s' % (method, url, reason))


class HttpResponse:
    """A complete (or, with ``stream``, still open) HTTP answer."""

    def __init__(self, method, url, status, body=b'', headers=None, latency=0.0, raw=None):
        self.method = method
        self.url = url
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.latency = latency
        self.raw = raw

    @property
    def text(self):
        return to_text(self.body or b'', errors='surrogate_or_replace')

    def excerpt(self, limit=EXCERPT_LIMIT):
        """The body as text, cut to ``limit`` characters for messages."""
        return excerpt(self.text, limit)

    def json(self):
        """Decode the body as JSON; raises ``ValueError`` with the excerpt on failure."""
        try:
            return json.loads(self.text)
        except ValueError as exc:
            raise ValueError('%s %s answered HTTP %s with a body that is not JSON (%s): %r'
                             % (self.method, self.url, self.status, exc, self.excerpt()))

    def close(self):
        if self.raw is not None:
            try:
                self.raw.close()
            except Exception:  # pragma: no cover - best effort
                pass
            self.raw = None


def excerpt(text, limit=EXCERPT_LIMIT):
    text = to_text(text, errors='surrogate_or_replace')
    if len(text) <= limit:
        return text
    return text[:limit - 3] + '...'


def describe_error(exc):
    """A short human description of a transport exception."""
    reason = getattr(exc, 'reason', None) or exc
    text = to_native(reason)
    if not text or text == 'timed out':
        text = '%s%s' % (type(reason).__name__, ': ' + text if text else '')
    return text


def is_refused(exc):
    """Whether a transport exception is a refused connection (nothing listens on the port)."""
    return isinstance(exc, ConnectionRefusedError) or isinstance(getattr(exc, 'reason', None), ConnectionRefusedError)


def normalise_url(url):
    """Compare URLs without the trailing slash (``http://h:1/`` == ``http://h:1``)."""
    return to_text(url).strip().rstrip('/')


def join_url(base, path):
    return normalise_url(base) + '/' + path.lstrip('/')


def round_seconds(value):
    return round(value, 4)


class HttpClient:
    """Thin wrapper around ``ansible.module_utils.urls.Request`` with auth, JSON bodies and timing."""

    def __init__(self, timeout=10, validate_certs=True, headers=None, api_key=None, use_proxy=True):
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.headers = dict(headers or {})
        if api_key:
            self.headers['Authorization'] = 'Bearer %s' % api_key
        self.use_proxy = use_proxy
        self._request = Request(use_proxy=use_proxy, validate_certs=validate_certs, follow_redirects='safe')
        self._ssl_context = None

    def _context(self, url):
        """One TLS context per client: building it loads the CA bundle, which is slow."""
        if not url.lower().startswith('https:'):
            return None
        if self._ssl_context is None:
            self._ssl_context = make_context(validate_certs=self.validate_certs)
        return self._ssl_context

    def request(self, method, url, body=None, timeout=None, stream=False, headers=None):
        """Send one request and return an ``HttpResponse`` whatever the status.

        ``body`` that is not ``bytes``/``str`` is encoded as JSON. With ``stream``
        a 2xx response keeps its socket open in ``HttpResponse.raw`` and its body
        is not read; the caller reads and closes it.
        Raises ``HttpRequestError`` when no HTTP answer arrived.
        """
        req_headers = {'Accept': 'application/json'}
        req_headers.update(self.headers)
        req_headers.update(headers or {})
        data = None
        if body is not None:
            if isinstance(body, bytes):
                data = body
            elif isinstance(body, str):
                data = body.encode('utf-8')
            else:
                data = json.dumps(body).encode('utf-8')
            req_headers.setdefault('Content-Type', 'application/json')
        if timeout is None:
            timeout = self.timeout
        start = time.monotonic()
        try:
            resp = self._request.open(method, url, data=data, headers=req_headers, timeout=timeout,
                                      context=self._context(url))
        except HTTPError as exc:
            try:
                err_body = exc.read()
            except Exception:
                err_body = b''
            return HttpResponse(method, url, exc.code, err_body, dict(exc.headers or {}),
                                time.monotonic() - start)
        except TRANSPORT_ERRORS as exc:
            raise HttpRequestError(method, url, describe_error(exc), refused=is_refused(exc))
        status = resp.getcode() if hasattr(resp, 'getcode') else resp.status
        resp_headers = dict(resp.headers or {}) if hasattr(resp, 'headers') else {}
        if stream:
            return HttpResponse(method, url, status, None, resp_headers, time.monotonic() - start, raw=resp)
        try:
            payload = resp.read()
        except TRANSPORT_ERRORS as exc:
            raise HttpRequestError(method, url, 'reading the response failed: %s' % describe_error(exc))
        finally:
            resp.close()
        return HttpResponse(method, url, status, payload, resp_headers, time.monotonic() - start)


class HealthPoller:
    """Poll one URL until it answers with an expected status or a deadline passes.

    Backoff: the first attempt starts after ``initial_delay``; after the n-th
    failed attempt the poller sleeps ``interval * 2 ** (n - 1)`` seconds, capped at
    ``refused_max_interval`` while no attempt has had an HTTP answer (nothing listens
    yet: a server loading its model) and at ``max_interval`` from the first HTTP answer
    on (any status: a server warming up answers 503), so a healthy answer is seen at
    most ``max_interval`` late. A wait that would pass the deadline is cut to end there
    and followed by one last attempt.
    """

    def __init__(self, client, url, method='GET', body=None, status_codes=(200,), timeout=600.0,
                 request_timeout=10.0, initial_delay=0.0, interval=1.0, max_interval=0.5,
                 refused_max_interval=2.0, clock=time.monotonic, sleep=time.sleep):
        self.client = client
        self.url = url
        self.method = method
        self.body = body
        self.status_codes = list(status_codes)
        self.timeout = float(timeout)
        self.request_timeout = float(request_timeout)
        self.initial_delay = float(initial_delay)
        self.interval = float(interval)
        self.max_interval = float(max_interval)
        self.refused_max_interval = float(refused_max_interval)
        self.clock = clock
        self.sleep = sleep

    def backoff(self, attempt, answered):
        """Seconds to wait after failed attempt number ``attempt`` (1-based).

        ``answered``: whether any attempt so far got an HTTP answer, whatever its status.
        """
        cap = self.max_interval if answered else self.refused_max_interval
        return min(self.interval * (2 ** (attempt - 1)), cap)

    def run(self):
        """Return ``(ok, result)``; ``result`` always carries the return values."""
        start = self.clock()
        deadline = start + self.timeout
        attempts = 0
        last_status = None
        last_error = None
        last_excerpt = None
        if self.initial_delay > 0:
            self.sleep(min(self.initial_delay, self.timeout))
        last_try = False
        answered = False
        while True:
            attempts += 1
            # A request never runs far past the deadline, but gets at least 1 s (or request_timeout if smaller).
            remaining = deadline - self.clock()
            req_timeout = max(min(self.request_timeout, remaining), min(self.request_timeout, 1.0))
            try:
                resp = self.client.request(self.method, self.url, body=self.body, timeout=req_timeout)
            except HttpRequestError as exc:
                last_status, last_error, last_excerpt = None, exc.reason, None
            else:
                last_status, last_error, answered = resp.status, None, True
                last_excerpt = resp.excerpt(200)
                if resp.status in self.status_codes:
                    return True, dict(
                        url=self.url,
                        status=resp.status,
                        attempts=attempts,
                        elapsed=round_seconds(self.clock() - start),
                        latency=round_seconds(resp.latency),
                    )
            remaining = deadline - self.clock()
            if last_try or remaining <= 0:
                break
            pause = self.backoff(attempts, answered)
            if pause >= remaining:
                # Sleep up to the deadline and try one last time there.
                pause, last_try = remaining, True
            self.sleep(pause)

        elapsed = self.clock() - start
        if last_error is not None:
            found = 'the last attempt failed without an HTTP answer: %s' % last_error
        else:
            found = 'the last attempt answered HTTP %s' % last_status
            if last_excerpt:
                found += ' with body %r' % last_excerpt
        msg = ('%s %s did not answer with HTTP status %s within %.1f s (%d attempt%s); %s.'
               % (self.method, self.url, ' or '.join(str(c) for c in self.status_codes), self.timeout,
                  attempts, '' if attempts == 1 else 's', found))
        return False, dict(
            msg=msg,
            url=self.url,
            status=last_status,
            error=last_error,
            attempts=attempts,
            elapsed=round_seconds(elapsed),
            latency=None,
        )


def run_health_module(module):
    """Entry point of the sglang_health module: one URL, or every URL of ``urls`` at once."""
    p = module.params
    if p['timeout'] <= 0:
        module.fail_json(msg='timeout must be greater than 0, got %s. [SGLPD-ARG-001]' % p['timeout'])
    if min(p['interval'], p['max_interval'], p['refused_max_interval']) <= 0:
        module.fail_json(msg='interval, max_interval and refused_max_interval must be greater than 0, '
                             'got %s, %s and %s. [SGLPD-ARG-001]' % (p['interval'], p['max_interval'],
                                                                     p['refused_max_interval']))

    def poll(url):
        # One client per URL: each poller runs in its own thread.
        client = HttpClient(timeout=p['request_timeout'], validate_certs=p['validate_certs'],
                            headers=p['headers'], api_key=p['api_key'])
        return HealthPoller(
            client, url, method=p['method'], body=p['body'], status_codes=p['status_code'],
            timeout=p['timeout'], request_timeout=p['request_timeout'], initial_delay=p['initial_delay'],
            interval=p['interval'], max_interval=p['max_interval'],
            refused_max_interval=p['refused_max_interval']).run()

    if p['url'] is not None:
        ok, result = poll(p['url'])
        if ok:
            module.exit_json(changed=False, **result)
        msg = result.pop('msg')
        module.fail_json(msg=msg + ' [SGLPD-WRK-001]', changed=False, **result)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(HEALTH_THREADS, len(p['urls'])))) as pool:
        polled = list(pool.map(poll, p['urls']))
    results = [result for dummy, result in polled]
    failed = [result.pop('msg') for ok, result in polled if not ok]
    if failed:
        module.fail_json(msg='%d of %d URLs failed their health check: %s [SGLPD-WRK-001]' % (len(failed), len(polled), ' '.join(failed)),
                         changed=False, results=results)
    module.exit_json(changed=False, results=results)
