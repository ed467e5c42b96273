# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""The PD path watcher's decisions (_pd_watch.decide) and one round against a fake router and probe."""

from __future__ import annotations

import json

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _pd_watch as pw
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HttpResponse

P1, P2 = 'http://10.0.0.11:30100', 'http://10.0.0.12:30100'
D1, D2 = 'http://10.0.0.21:30200', 'http://10.0.0.22:30200'


def test_a_decode_whose_every_pair_failed_k_rounds_leaves_rotation():
    streaks = {D1: [(0, 2), (0, 2)], D2: [(3, 0), (3, 0)]}
    assert pw.decide(streaks, {D1, D2}, set(), 2, 2, False) == dict(remove=[D1], add=[], kept=[], paused=[])


def test_one_failed_round_or_one_passing_pair_keeps_a_decode():
    assert pw.decide({D1: [(0, 1), (0, 1)], D2: [(3, 0)]}, {D1, D2}, set(), 2, 2, False)['remove'] == []
    assert pw.decide({D1: [(0, 5), (1, 0)], D2: [(3, 0)]}, {D1, D2}, set(), 2, 2, False)['remove'] == []


def test_the_last_decode_whose_path_passes_is_never_taken_out_it_is_kept_and_reported():
    # Every decode fails (the prefill's fault, most likely): nothing leaves, both are kept.
    verdict = pw.decide({D1: [(0, 3)], D2: [(0, 3)]}, {D1, D2}, set(), 2, 2, False)
    assert verdict['remove'] == [] and verdict['kept'] == [D1, D2]
    # One decode left in rotation and it fails: kept.
    assert pw.decide({D1: [(0, 3)]}, {D1}, {D2}, 2, 2, False)['kept'] == [D1]


def test_only_a_decode_the_watcher_removed_is_added_back_once_healed():
    streaks = {D1: [(2, 0)], D2: [(5, 0)]}
    # D2 is out of the routers but not by the watcher (a playbook drained it): never added.
    assert pw.decide(streaks, set(), {D1}, 2, 2, False)['add'] == [D1]
    assert pw.decide({D1: [(1, 0)]}, set(), {D1}, 2, 2, False)['add'] == []


def test_while_the_fleet_lock_is_held_nothing_is_removed_or_added():
    streaks = {D1: [(0, 4)], D2: [(4, 0)], 'http://x:1': [(4, 0)]}
    verdict = pw.decide(streaks, {D1, D2}, {'http://x:1'}, 2, 2, True)
    assert verdict['remove'] == [] and verdict['add'] == [] and verdict['paused'] == [D1, 'http://x:1']


def worker_id(url):
    return url.split('//')[1].replace(':', '-').replace('.', '-')


class FakeHttp:
    """A router's worker API: GET /workers, DELETE /workers/{id}, POST /workers."""

    def __init__(self, workers):
        self.workers, self.calls, self.headers = workers, [], {}

    def request(self, method, url, body=None, **_kwargs):
        self.calls.append((method, url, body))
        if method == 'GET':
            data = {'workers': [dict(w, id=worker_id(w['url'])) for w in self.workers]}
            return HttpResponse(method, url, 200, json.dumps(data).encode())
        if method == 'DELETE':
            self.workers = [w for w in self.workers if not url.endswith('/' + worker_id(w['url']))]
            return HttpResponse(method, url, 202, b'{}')
        self.workers.append(dict(url=body['url'], worker_type=body['worker_type'], is_healthy=True))
        return HttpResponse(method, url, 202, b'{}')


def make_watcher(tmp_path, http, broken, lock_path=None):
    def probe(pairs, _common, _parallel):
        return [dict(pair, failed=pair['decode_url'] in broken, msg='broken' if pair['decode_url'] in broken else None)
                for pair in pairs]
    return pw.Watcher(['http://127.0.0.1:30000'], str(tmp_path / 'state.json'), str(tmp_path / 'watch.prom'),
                      lock_path, probe=probe, http_factory=lambda: http, clock=lambda: 1000.0)


def test_rounds_take_a_broken_decode_out_of_the_router_and_back_once_healed(tmp_path):
    http = FakeHttp([dict(url=P1, worker_type='prefill', bootstrap_port=8998, is_healthy=True),
                     dict(url=D1, worker_type='decode', is_healthy=True), dict(url=D2, worker_type='decode', is_healthy=True)])
    broken = {D1}
    watcher = make_watcher(tmp_path, http, broken)
    assert watcher.round()['removed'] == []
    state = watcher.round()
    assert state['removed'] == [D1] and [h['url'] for h in state['held_out']] == [D1]
    assert [w['url'] for w in http.workers] == [P1, D2]
    metrics = (tmp_path / 'watch.prom').read_text()
    assert 'sglang_pd_watch_held_out{decode="%s"} 1' % D1 in metrics
    assert 'sglang_pd_watch_pair_ok{prefill="%s",decode="%s"} 0' % (P1, D1) in metrics
    # The watcher restarts: it still knows what it took out (its state file), and keeps probing it.
    watcher = make_watcher(tmp_path, http, broken)
    broken.clear()
    assert watcher.round()['added'] == []
    state = watcher.round()
    assert state['added'] == [D1] and state['held_out'] == []
    assert http.calls[-1][0] == 'POST' and http.calls[-1][2] == dict(url=D1, worker_type='decode')
    assert sorted(w['url'] for w in http.workers) == sorted([P1, D1, D2])


def test_a_held_fleet_lock_pauses_the_watcher(tmp_path):
    http = FakeHttp([dict(url=P1, worker_type='prefill', bootstrap_port=8998, is_healthy=True),
                     dict(url=D1, worker_type='decode', is_healthy=True), dict(url=D2, worker_type='decode', is_healthy=True)])
    lock = tmp_path / 'fleet.lock'
    lock.write_text(json.dumps(dict(user='ops', controller='ctl', pid=7, playbook='site.yml', since='now')))
    watcher = make_watcher(tmp_path, http, {D1}, str(lock))
    watcher.round()
    state = watcher.round()
    assert state['removed'] == [] and state['paused'] == [D1] and 'ops@ctl' in state['paused_by']
    assert not [c for c in http.calls if c[0] != 'GET']
    assert 'sglang_pd_watch_paused 1' in (tmp_path / 'watch.prom').read_text()
