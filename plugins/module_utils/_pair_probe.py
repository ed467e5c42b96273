# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""One request to a chosen prefill and decode pair, sent the way the PD router sends it (private).

sglang-router 0.3.2 in PD mode (its HTTP pd_router and bootstrap field
injection) adds to the client's body ``bootstrap_host`` (the host of the prefill
worker's URL), ``bootstrap_port`` (the prefill's bootstrap port, given when it
was registered) and ``bootstrap_room`` (a random integer in [0, 2**63 - 1]),
sends that same body to the prefill and the decode worker at once, waits for
both, and answers with decode's response (decode's error status and body when
decode fails). This probe does the same for one pair and checks decode's
completion and the latency; ``probe_pairs`` probes many pairs, a few at a time,
in one module call.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._chat import (
    CHAT_PATH,
    DEFAULT_MESSAGES,
    MODELS_PATH,
    _content_of,
    split_base_url,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import (
    HttpClient,
    HttpRequestError,
    excerpt,
)

ROOM_MAX = 2 ** 63 - 1
# The long probe: a prompt of LONG_PROMPT_WORDS words (each one token or more to a model's
# tokenizer, so at least 8192 prompt tokens: with SGLang 0.5.14's default --page-size of 1,
# as many KV pages) and a longer answer, so the KV transfer of a long request is proven.
LONG_PROMPT_WORDS = 8192
LONG_MAX_TOKENS = 256
SHORT_MAX_TOKENS = 8
_LONG_WORDS = ('alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel')


def long_messages(words=LONG_PROMPT_WORDS):
    """The long probe's chat messages: the same text every time (deterministic), WORDS words."""
    text = ' '.join(_LONG_WORDS[index % len(_LONG_WORDS)] for index in range(words))
    return [{'role': 'user', 'content': 'Repeat the last word of this list: ' + text}]


class PairProbeError(Exception):
    def __init__(self, msg, **result):
        super().__init__(msg)
        self.msg = msg
        self.result = result


def bootstrap_host_of(url):
    """The host the router injects as bootstrap_host: the host of the prefill URL, without brackets."""
    return urlsplit(split_base_url(url)).hostname or ''


def pair_name(prefill_url, bootstrap_host, bootstrap_port, decode_url):
    """How every message names the pair."""
    host = '[%s]' % bootstrap_host if ':' in bootstrap_host else bootstrap_host
    return 'prefill %s (bootstrap %s:%s) -> decode %s' % (prefill_url, host, bootstrap_port, decode_url)


def error_text(resp):
    """An error response's message: SGLang's ``{"message": ...}`` / ``{"error": ...}``, else the body excerpt."""
    try:
        data = resp.json()
    except ValueError:
        return resp.excerpt()
    if isinstance(data, dict):
        for key in ('message', 'error', 'detail'):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get('message') or value
            if value:
                return excerpt(value if isinstance(value, str) else repr(value))
    return resp.excerpt()


class PairProbe:
    """Send one chat completion to a prefill and a decode server at once, with the same bootstrap fields."""

    def __init__(self, prefill_url, decode_url, bootstrap_port, bootstrap_host=None, room=None, model=None,
                 messages=None, max_tokens=None, timeout=60.0, max_latency_ms=None, api_key=None,
                 validate_certs=True, clock=time.monotonic, client_factory=None, long=False):
        self.prefill_url = split_base_url(prefill_url)
        self.decode_url = split_base_url(decode_url)
        self.bootstrap_host = bootstrap_host or bootstrap_host_of(prefill_url)
        self.bootstrap_port = bootstrap_port
        self.room = random.SystemRandom().randint(0, ROOM_MAX) if room is None else room
        self.model = model
        self.long = bool(long)
        self.messages = messages or (long_messages() if self.long else DEFAULT_MESSAGES)
        self.max_tokens = max_tokens or (LONG_MAX_TOKENS if self.long else SHORT_MAX_TOKENS)
        self.timeout = float(timeout)
        self.max_latency_ms = max_latency_ms
        self.clock = clock
        # One client per server: the two requests run in separate threads.
        factory = client_factory or (lambda: HttpClient(timeout=self.timeout, validate_certs=validate_certs, api_key=api_key))
        self._clients = dict(prefill=factory(), decode=factory())
        self.pair = pair_name(self.prefill_url, self.bootstrap_host, self.bootstrap_port, self.decode_url)

    def _result(self, **values):
        result = dict(pair=self.pair, room=self.room, long=self.long, prefill_url=self.prefill_url, decode_url=self.decode_url,
                      bootstrap_host=self.bootstrap_host, bootstrap_port=self.bootstrap_port, model=self.model)
        result.update(values)
        return result

    def _fail(self, what, fix, **values):
        kind = 'long probe (%d-word prompt, max_tokens %s) of ' % (LONG_PROMPT_WORDS, self.max_tokens) if self.long else ''
        return PairProbeError('%sPD pair %s, bootstrap_room %s: %s. %s' % (kind, self.pair, self.room, what, fix),
                              **self._result(**values))

    def resolve_model(self):
        """The first model decode lists (the router forwards the client's model name to both)."""
        url = self.decode_url + MODELS_PATH
        try:
            resp = self._clients['decode'].request('GET', url)
        except HttpRequestError as exc:
            raise self._fail('no model given and GET %s got no answer: %s' % (url, exc.reason),
                             'Check that the decode server runs, or set the model option.')
        try:
            data = resp.json() if resp.status == 200 else None
            model = data['data'][0]['id']
        except (ValueError, TypeError, KeyError, IndexError):
            raise self._fail('no model given and GET %s answered HTTP %s without a model list: %r'
                             % (url, resp.status, resp.excerpt()), 'Set the model option.', status=resp.status)
        return model

    def request_body(self):
        return dict(model=self.model, messages=self.messages, max_tokens=self.max_tokens, stream=False,
                    bootstrap_host=self.bootstrap_host, bootstrap_port=self.bootstrap_port, bootstrap_room=self.room)

    def _send(self, role, url, body, answers):
        try:
            answers[role] = self._clients[role].request('POST', url + CHAT_PATH, body=body, timeout=self.timeout)
        except HttpRequestError as exc:
            answers[role] = exc

    def dispatch(self, body):
        """Both requests at once; returns ({'prefill': resp or error, 'decode': ...}, seconds until both answered)."""
        answers = {}
        threads = [threading.Thread(target=self._send, args=(role, url, body, answers), name='pd-probe-%s' % role)
                   for role, url in (('prefill', self.prefill_url), ('decode', self.decode_url))]
        start = self.clock()
        for thread in threads:
            thread.daemon = True
            thread.start()
        for thread in threads:
            thread.join(self.timeout + 5)
        elapsed = self.clock() - start
        for role in ('prefill', 'decode'):
            answers.setdefault(role, HttpRequestError('POST', getattr(self, role + '_url') + CHAT_PATH,
                                                      'no answer within %.1f s' % self.timeout))
        return answers, elapsed

    def run(self):
        if not self.model:
            self.model = self.resolve_model()
        answers, elapsed = self.dispatch(self.request_body())
        latency_ms = round(elapsed * 1000.0, 1)
        decode, prefill = answers['decode'], answers['prefill']
        prefill_status = None if isinstance(prefill, HttpRequestError) else prefill.status
        if isinstance(decode, HttpRequestError):
            raise self._fail('decode got no answer: %s' % decode.reason,
                             'A decode that cannot reach the prefill bootstrap server waits for its KV cache until '
                             'SGLANG_DISAGGREGATION_WAITING_TIMEOUT; check that the decode host reaches %s:%s and that '
                             'this port is the prefill\'s --disaggregation-bootstrap-port.'
                             % (self.bootstrap_host, self.bootstrap_port),
                             latency_ms=latency_ms, prefill_status=prefill_status)
        if decode.status != 200:
            raise self._fail('decode answered HTTP %s: %s' % (decode.status, error_text(decode)),
                             'Check that %s:%s is the prefill\'s --disaggregation-bootstrap-port, that the decode host '
                             'reaches it, and that the prefill got the same bootstrap_room.'
                             % (self.bootstrap_host, self.bootstrap_port),
                             latency_ms=latency_ms, decode_status=decode.status, prefill_status=prefill_status)
        if isinstance(prefill, HttpRequestError) or prefill.status != 200:
            found = prefill.reason if isinstance(prefill, HttpRequestError) else 'HTTP %s: %s' % (prefill.status, error_text(prefill))
            raise self._fail('decode answered, but prefill failed: %s' % found,
                             'Read the prefill server\'s log for this bootstrap_room.',
                             latency_ms=latency_ms, decode_status=decode.status, prefill_status=prefill_status)
        try:
            data = decode.json()
            choice = data['choices'][0]
            content = _content_of(choice.get('message'))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise self._fail('decode answered HTTP 200 without a chat completion: %r' % decode.excerpt(),
                             'Check that the URL is an SGLang decode server.', latency_ms=latency_ms,
                             decode_status=decode.status, prefill_status=prefill_status)
        values = dict(latency_ms=latency_ms, decode_status=decode.status, prefill_status=prefill_status,
                      content=content, usage=data.get('usage') or {}, finish_reason=choice.get('finish_reason'))
        if not content.strip():
            raise self._fail('decode answered HTTP 200 with an empty completion', 'Read the decode server\'s log.',
                             **values)
        if self.max_latency_ms is not None and latency_ms > self.max_latency_ms:
            raise self._fail('the pair answered in %.1f ms, more than max_latency_ms %s' % (latency_ms, self.max_latency_ms),
                             'A slow first request often waits for a KV transfer over TCP instead of RDMA: check the '
                             'workers\' transport, or raise max_latency_ms.', **values)
        return self._result(**values)


# What each pair may set for itself; the other options are common to every pair.
PAIR_KEYS = ('prefill_url', 'decode_url', 'bootstrap_port', 'bootstrap_host', 'room', 'api_key')
COMMON_KEYS = ('model', 'messages', 'max_tokens', 'timeout', 'max_latency_ms', 'api_key', 'validate_certs', 'long')


def pair_option_problem(pair):
    """Why a pair's options cannot be probed, or None."""
    if pair.get('room') is not None and not 0 <= pair['room'] <= ROOM_MAX:
        return 'room must be between 0 and 2**63 - 1 (as the router draws it), got %s.' % pair['room']
    if not 0 < pair['bootstrap_port'] <= 65535:
        return 'bootstrap_port must be a TCP port (1-65535), got %s.' % pair['bootstrap_port']
    return None


def probe_one(pair, common):
    """Probe one pair (PAIR_KEYS over the COMMON_KEYS); its result, with failed and, when it failed, msg."""
    options = dict(common)
    options.update((key, value) for key, value in pair.items() if value is not None)
    prefill_url, decode_url, bootstrap_port = options.pop('prefill_url'), options.pop('decode_url'), options.pop('bootstrap_port')
    probe = PairProbe(prefill_url, decode_url, bootstrap_port, **options)
    try:
        return dict(probe.run(), failed=False)
    except PairProbeError as exc:
        return dict(exc.result, failed=True, msg=exc.msg)


def probe_pairs(pairs, common, parallel):
    """Probe PAIRS, at most PARALLEL at a time; their results, in the order of PAIRS."""
    if not pairs:
        return []
    with ThreadPoolExecutor(max_workers=min(parallel, len(pairs)), thread_name_prefix='pd-pair') as pool:
        return list(pool.map(lambda pair: probe_one(pair, common), pairs))


def failed_pairs_message(results):
    """One message naming every pair that failed, each with its own message."""
    failed = [result for result in results if result['failed']]
    return '%d of %d prefill -> decode pairs failed: %s' % (
        len(failed), len(results), ' | '.join(result['msg'] for result in failed))


def run_pair_probe_module(module):
    """Entry point of the sglang_pd_pair_probe module: one pair, or every pair of the pairs option."""
    p = module.params
    if p['timeout'] <= 0:
        module.fail_json(msg='timeout must be greater than 0, got %s. [SGLPD-ARG-001]' % p['timeout'])
    if p['parallel'] < 1:
        module.fail_json(msg='parallel must be 1 or more, got %s. [SGLPD-ARG-002]' % p['parallel'])
    common = {key: p[key] for key in COMMON_KEYS}
    if p['pairs'] is None:
        pair = {key: p[key] for key in PAIR_KEYS}
        problem = pair_option_problem(pair)
        if problem:
            module.fail_json(msg=problem + ' [SGLPD-PRB-001]')
        result = probe_one(pair, common)
        if result.pop('failed'):
            module.fail_json(changed=False, **dict(result, msg=result['msg'] + ' [SGLPD-PRB-002]'))
        module.exit_json(changed=False, **result)
    for index, pair in enumerate(p['pairs']):
        problem = pair_option_problem(pair)
        if problem:
            module.fail_json(msg='pairs[%d] (prefill %s -> decode %s): %s [SGLPD-PRB-001]' % (index, pair['prefill_url'], pair['decode_url'], problem))
    results = probe_pairs(p['pairs'], common, p['parallel'])
    if any(result['failed'] for result in results):
        module.fail_json(msg=failed_pairs_message(results) + ' [SGLPD-PRB-002]', changed=False, results=results)
    module.exit_json(changed=False, results=results)
