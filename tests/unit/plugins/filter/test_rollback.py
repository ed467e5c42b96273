# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""rollback_target, rollback_history, rollback_listing: the image a rollback goes back to, and why not."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.mindverse.sglang_pd.plugins.filter.rollback import (
    rollback_history, rollback_listing, rollback_target)

OLD = 'sha256:' + 'a' * 64
NEW = 'sha256:' + 'b' * 64
OLDER = 'sha256:' + 'c' * 64


def history(*entries):
    """A node's history, newest first: each entry a digest, held unless given as (digest, False)."""
    return [{'digest': e, 'held': True} if isinstance(e, str) else {'digest': e[0], 'held': e[1]} for e in entries]


def test_previous_is_the_digest_every_node_ran_before_its_newest():
    target = rollback_target({'n0': history(NEW, OLD, OLDER), 'n1': history(NEW, OLD)}, 'previous')
    assert target == {'digest': OLD, 'problems': []}


def test_a_full_digest_some_node_ran_is_taken():
    assert rollback_target({'n0': history(NEW, OLD, OLDER), 'n1': history(NEW, OLD, OLDER)}, OLDER) == {
        'digest': OLDER, 'problems': []}


@pytest.mark.parametrize('histories, request_, words', [
    ({'n0': history(NEW, OLD), 'n1': history(NEW)}, 'previous', ['no earlier digest', 'n1']),
    ({'n0': history(NEW, OLD), 'n1': history(NEW, OLDER)}, 'previous', ['different images', 'n0 ' + OLD, 'n1 ' + OLDER]),
    ({'n0': history(NEW, OLD)}, 'sha256:' + 'd' * 64, ['never ran healthy', 'rolling_upgrade.yml']),
    ({'n0': history(NEW, OLD)}, 'sha256:abc', ['previous or a full digest']),
    ({'n0': history(NEW, OLD)}, 'latest', ['previous or a full digest', "'latest'"]),
    ({'n0': history(NEW, (OLD, False)), 'n1': history(NEW, OLD)}, 'previous',
     ['no longer held on n0', 'sglang_pd_rollback_pull=true']),
    ({'n0': history(NEW, OLD), 'n1': history(NEW)}, OLD, ['no longer held on n1']),
])
def test_a_rollback_that_cannot_be_made_is_refused_with_why(histories, request_, words):
    problems = rollback_target(histories, request_)['problems']
    assert len(problems) == 1 and all(word in problems[0] for word in words), problems


def test_a_node_may_pull_an_image_it_no_longer_holds_when_the_run_allows_it():
    histories = {'n0': history(NEW, (OLD, False)), 'n1': history(NEW)}
    assert rollback_target(histories, OLD, may_pull=True) == {'digest': OLD, 'problems': []}


def test_no_history_at_all_is_an_error_of_the_caller():
    with pytest.raises(AnsibleFilterError):
        rollback_target({}, 'previous')


def test_the_history_is_newest_first_and_marks_what_is_held():
    assert rollback_history([OLDER, OLD, NEW], [NEW, OLDER, '']) == [
        {'digest': NEW, 'held': True}, {'digest': OLD, 'held': False}, {'digest': OLDER, 'held': True}]
    assert rollback_history([], []) == []


def test_the_listing_names_every_node_and_each_digest_held_or_removed():
    assert rollback_listing({'n1': [], 'n0': history(NEW, (OLD, False))}) == [
        'n0: %s (held), %s (removed)' % (NEW, OLD), 'n1: no image ran healthy here']
