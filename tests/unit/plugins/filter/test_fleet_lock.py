# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""fleet_lock_quorum: a run holds the fleet lock only on a strict majority of its lock hosts."""

from __future__ import annotations

import itertools

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.filter.fleet_lock import fleet_lock_quorum

OTHER = {'run_id': 'run-b', 'controller': 'ctl-02', 'user': 'ops', 'pid': 7, 'playbook': 'site.yml', 'since': 0}


def results(**answers):
    """The lock task's loop results: 'mine', 'other' (held by OTHER), 'unreachable' or 'error' per host."""
    made = []
    for host, answer in answers.items():
        host = host.replace('_', '-')
        if answer == 'unreachable':
            made.append({'item': host, 'unreachable': True, 'msg': 'Connection refused'})
        elif answer == 'error':
            made.append({'item': host, 'failed': False, 'msg': 'Permission denied', 'holder': None})
        else:
            made.append({'item': host, 'holder': dict(OTHER, run_id='run-a') if answer == 'mine' else OTHER,
                         'msg': 'The fleet is locked' if answer == 'other' else None})
    return made


def test_two_of_three_is_a_majority_and_the_missing_host_is_named():
    quorum = fleet_lock_quorum(results(r1='mine', r2='mine', r3='unreachable'), ['r1', 'r2', 'r3'], 'run-a')
    assert quorum['ok'] is True and quorum['held'] == ['r1', 'r2'] and quorum['unreachable'] == ['r3'] and quorum['needed'] == 2
    assert quorum['msg'] == 'This run holds the fleet lock on 2 of its 3 lock hosts (r1, r2, r3), 2 needed: r3 unreachable.'


def test_every_lock_host_held_says_nothing():
    quorum = fleet_lock_quorum(results(r1='mine'), ['r1'], 'run-a')
    assert quorum['ok'] is True and quorum['msg'] == ''


def test_short_of_a_majority_the_holders_and_the_unreachable_hosts_are_named():
    quorum = fleet_lock_quorum(results(r1='mine', r2='other', r3='unreachable', r4='error'), ['r1', 'r2', 'r3', 'r4'], 'run-a')
    assert quorum['ok'] is False and quorum['needed'] == 3 and quorum['held'] == ['r1']
    assert quorum['msg'].startswith(
        'This run holds the fleet lock on 1 of its 4 lock hosts (r1, r2, r3, r4), 3 needed: '
        'r2 locked by ops@ctl-02 (pid 7, site.yml) since 1970-01-01 00:00:00 UTC; r4 Permission denied; r3 unreachable. '
        'It released what it took.')
    assert '-e sglang_pd_break_lock=true' in quorum['msg']


@pytest.mark.parametrize('hosts, held', [(['r1', 'r2'], 1), (['r1', 'r2', 'r3', 'r4'], 2), ([], 0)])
def test_half_is_not_a_majority(hosts, held):
    answers = dict((host, 'mine' if index < held else 'unreachable') for index, host in enumerate(hosts))
    assert fleet_lock_quorum(results(**answers), hosts, 'run-a')['ok'] is False


@pytest.mark.parametrize('count', [1, 2, 3, 4, 5])
def test_two_runs_never_both_hold_a_majority(count):
    hosts = ['r%d' % index for index in range(count)]
    for owners in itertools.product(('run-a', 'run-b', None), repeat=count):
        made = [{'item': host, 'holder': dict(OTHER, run_id=owner)} if owner else {'item': host, 'unreachable': True}
                for host, owner in zip(hosts, owners)]
        assert not (fleet_lock_quorum(made, hosts, 'run-a')['ok'] and fleet_lock_quorum(made, hosts, 'run-b')['ok']), owners
