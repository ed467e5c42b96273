# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Wait until an SGLang server has no request in flight (private: the API may change).

Two sources, as SGLang exposes them:

* ``get_load``: ``GET /get_load`` answers a list with one entry per data-parallel rank,
  ``{"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}`` (always served).
* ``metrics``: ``GET /metrics`` (servers started with ``--enable-metrics``), where the
  gauges ``sglang:num_running_reqs`` and ``sglang:num_queue_reqs`` are summed over
  their label sets.
"""

from __future__ import annotations

import time

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import (
    HttpClient,
    HttpRequestError,
    join_url,
    round_seconds,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._prometheus import samples

SOURCES = ('get_load', 'metrics')
DEFAULT_METRICS = ('sglang:num_running_reqs', 'sglang:num_queue_reqs')
LOAD_KEYS = ('num_reqs', 'num_waiting_reqs')


class Unavailable(Exception):
    """The source gave no usable number (not served, or not in the expected shape)."""


def parse_load(data):
    """Requests in flight from a ``/get_load`` body, or raise ``Unavailable``."""
    if isinstance(data, dict):
        # Some versions wrap the per-rank list ({"loads": [...]}) or answer for one rank.
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(lists) == 1 else [data]
    if not isinstance(data, list) or not data:
        raise Unavailable('expected a list of per-rank loads, found %r' % (data,))
    total = 0
    found = False
    for rank in data:
        if not isinstance(rank, dict):
            raise Unavailable('expected each rank as an object, found %r' % (rank,))
        for key in LOAD_KEYS:
            value = rank.get(key)
            if isinstance(value, bool) or value is None:
                continue
            try:
                total += int(value)
            except (TypeError, ValueError):
                raise Unavailable('%s is not a number: %r' % (key, value))
            found = True
    if not found:
        raise Unavailable('no %s in %r' % (' or '.join(LOAD_KEYS), data))
    return total


def parse_metrics(text, names=DEFAULT_METRICS):
    """Sum of the named gauges over all their label sets, or raise ``Unavailable``."""
    wanted = set(names)
    total = 0.0
    found = set()
    for name, _labels, value in samples(text, wanted):
        try:
            total += float(value)
        except ValueError:
            raise Unavailable('%s has a value that is not a number: %r' % (name, value))
        found.add(name)
    if not found:
        raise Unavailable('none of %s in the metrics' % ', '.join(sorted(wanted)))
    return int(round(total))


class Drainer:
    """Poll a server's load until it reads zero ``settle`` times in a row, or time runs out."""

    def __init__(self, client, url, source='auto', metrics=DEFAULT_METRICS, timeout=300.0, interval=0.5,
                 settle=3, request_timeout=5.0, check_mode=False, clock=time.monotonic, sleep=time.sleep):
        self.client = client
        self.url = url
        self.source = source
        self.metrics = list(metrics)
        self.timeout = float(timeout)
        self.interval = float(interval)
        self.settle = int(settle)
        self.request_timeout = float(request_timeout)
        self.check_mode = check_mode
        self.clock = clock
        self.sleep = sleep

    def _read(self, source):
        """Requests in flight from one source; ``Unavailable`` if it has no answer."""
        if source == 'get_load':
            resp = self.client.request('GET', join_url(self.url, '/get_load'), timeout=self.request_timeout)
            if resp.status != 200:
                raise Unavailable('GET %s answered HTTP %s' % (resp.url, resp.status))
            try:
                return parse_load(resp.json())
            except ValueError as exc:
                raise Unavailable(str(exc))
        resp = self.client.request('GET', join_url(self.url, '/metrics'), timeout=self.request_timeout)
        if resp.status != 200:
            raise Unavailable('GET %s answered HTTP %s' % (resp.url, resp.status))
        return parse_metrics(resp.text, self.metrics)

    def read(self, source):
        """``(source, in_flight)``; with ``auto`` the first source that answers is kept."""
        if source != 'auto':
            return source, self._read(source)
        problems = []
        for candidate in SOURCES:
            try:
                return candidate, self._read(candidate)
            except Unavailable as exc:
                problems.append(str(exc))
        raise Unavailable('; '.join(problems))

    def run(self):
        """Return ``(ok, result)``.

        A server that refuses the connection has nothing in flight (nothing listens). A server
        that does not answer in time, or whose answer breaks off, may still hold requests: it is
        read again until the timeout, and then the drain fails (closed, never counted drained).
        """
        start = self.clock()
        deadline = start + self.timeout
        source = self.source
        polls = zeros = 0
        peak = None
        readings = []
        while True:
            polls += 1
            try:
                source, in_flight = self.read(source)
            except HttpRequestError as exc:
                if exc.refused:
                    return True, self._result(True, source, 0, peak, polls, start, readings, reachable=False,
                                              note='nothing listens there (%s): nothing can be in flight' % exc.reason)
                remaining = deadline - self.clock()
                if remaining <= 0 or self.check_mode:
                    return False, self._result(False, source, None, peak, polls, start, readings, reachable=False, msg=(
                        '%s did not answer for its load within %.1f s (%s): requests may still be in flight, so it '
                        'is not counted drained. Look at the server (a hung worker), or raise timeout.'
                        % (self.url, self.timeout, exc.reason)))
                zeros = 0
                self.sleep(min(self.interval, remaining))
                continue
            except Unavailable as exc:
                return False, self._result(False, source, None, peak, polls, start, readings, msg=(
                    '%s reports no load (%s). Use source=get_load on SGLang servers, or start them with '
                    '--enable-metrics and use source=metrics.' % (self.url, exc)))
            readings.append(in_flight)
            peak = in_flight if peak is None else max(peak, in_flight)
            zeros = zeros + 1 if in_flight == 0 else 0
            if self.check_mode:
                # Nothing was taken out of service in check mode: one reading is all there is to report.
                return True, self._result(in_flight == 0, source, in_flight, peak, polls, start, readings)
            if zeros >= self.settle:
                return True, self._result(True, source, in_flight, peak, polls, start, readings)
            remaining = deadline - self.clock()
            if remaining <= 0:
                return False, self._result(False, source, in_flight, peak, polls, start, readings, msg=(
                    '%s still had %d request(s) in flight after %.1f s (read from %s). Raise timeout, or '
                    'look for stuck requests on the server.' % (self.url, in_flight, self.timeout, source)))
            self.sleep(min(self.interval, remaining))

    def _result(self, drained, source, in_flight, peak, polls, start, readings, reachable=True, msg=None, note=None):
        result = dict(
            url=self.url,
            drained=drained,
            source=None if source == 'auto' else source,
            in_flight=in_flight,
            max_in_flight=peak,
            polls=polls,
            elapsed=round_seconds(self.clock() - start),
            reachable=reachable,
            readings=readings[-20:],
        )
        if msg:
            result['msg'] = msg
        if note:
            result['note'] = note
        return result


def run_drain_module(module):
    """Entry point of the sglang_drain module."""
    p = module.params
    for key in ('timeout', 'interval', 'request_timeout'):
        if p[key] <= 0:
            module.fail_json(msg='%s must be greater than 0, got %s. [SGLPD-ARG-001]' % (key, p[key]))
    if p['settle'] < 1:
        module.fail_json(msg='settle must be 1 or more, got %s. [SGLPD-ARG-002]' % p['settle'])
    client = HttpClient(timeout=p['request_timeout'], validate_certs=p['validate_certs'], api_key=p['api_key'])
    drainer = Drainer(client, p['url'], source=p['source'], metrics=p['metrics'], timeout=p['timeout'],
                      interval=p['interval'], settle=p['settle'], request_timeout=p['request_timeout'],
                      check_mode=module.check_mode)
    ok, result = drainer.run()
    if ok:
        if not result['reachable']:
            module.warn('%s: %s.' % (p['url'], result.pop('note')))
        module.exit_json(changed=False, **result)
    msg = result.pop('msg')
    if result['in_flight'] is not None and not p['fail_on_timeout']:
        module.warn(msg)
        module.exit_json(changed=False, **result)
    module.fail_json(msg=msg + ' [SGLPD-DRN-001]', changed=False, **result)
