# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The image a rollback moves the fleet to (playbooks/rollback.yml), from what each node ran healthy.

Each node's history (the sglang_image role's ``history`` entry point) lists the digests its SGLang
containers ran healthy, newest first, and whether the node still holds each image. A rollback goes
to a digest the fleet ran healthy before: ``previous`` is the one before the newest, the same on
every node; a digest given in full must be in some node's history. Every node must hold the image,
unless the run may pull it.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

DIGEST = re.compile(r'^sha256:[0-9a-f]{64}$')


def _previous(histories):
    """The digest before the newest on every node, or the problem that keeps one from being chosen."""
    earlier = {host: history[1]['digest'] if len(history) > 1 else None for host, history in histories.items()}
    without = sorted(host for host, digest in earlier.items() if digest is None)
    if without:
        return None, 'no earlier digest ran healthy on %s: give one with -e sglang_pd_rollback_to=sha256:...' % (
            ', '.join(without))
    if len(set(earlier.values())) > 1:
        return None, 'the nodes ran different images before their newest (%s): give the one to go back to with ' \
                     '-e sglang_pd_rollback_to=sha256:...' % '; '.join(
                         '%s %s' % (host, digest) for host, digest in sorted(earlier.items()))
    return next(iter(earlier.values())), None


def rollback_target(histories, request, may_pull=False):
    """The digest to roll back to, and why not: ``{digest, problems}``.

    HISTORIES maps each node to its history (a list of ``{digest, held}``, newest first); REQUEST is
    ``previous`` or a full ``sha256:`` digest; MAY_PULL lets nodes that no longer hold the image pull it.
    """
    if not isinstance(histories, dict) or not histories:
        raise AnsibleFilterError('rollback_target: expected the history of each node, got %r [SGLPD-DEF-001]' % (histories,))
    request = str(request).strip()
    if request == 'previous':
        digest, problem = _previous(histories)
        if problem:
            return {'digest': None, 'problems': [problem]}
    elif DIGEST.match(request):
        digest = request
        if not any(entry['digest'] == digest for history in histories.values() for entry in history):
            return {'digest': None, 'problems': [
                '%s never ran healthy on these nodes: rollback.yml goes back to an image the fleet served, '
                'rolling_upgrade.yml moves to a new one' % digest]}
    else:
        return {'digest': None, 'problems': [
            'sglang_pd_rollback_to is previous or a full digest (sha256: and 64 hex characters), not %r' % request]}
    missing = sorted(host for host, history in histories.items()
                     if not any(entry['digest'] == digest and entry['held'] for entry in history))
    problems = []
    if missing and not may_pull:
        problems.append('%s no longer held on %s: -e sglang_pd_rollback_pull=true pulls it there (from the '
                        'registry, verified as an upgrade is)' % (digest, ', '.join(missing)))
    return {'digest': digest, 'problems': problems}


def rollback_history(ran, held):
    """RAN (the digests a node ran healthy, oldest first) newest first, as ``{digest, held}``: HELD lists the
    digests whose image the node still holds."""
    held = set(held or [])
    return [{'digest': digest, 'held': digest in held} for digest in reversed(list(ran or []))]


def rollback_listing(histories):
    """One line per node: its digests newest first, each marked held or removed."""
    return ['%s: %s' % (host, ', '.join('%s (%s)' % (entry['digest'], 'held' if entry['held'] else 'removed')
                                        for entry in history) or 'no image ran healthy here')
            for host, history in sorted(histories.items())]


class FilterModule:
    """Choosing the image of a rollback."""

    def filters(self):
        return {'rollback_history': rollback_history, 'rollback_target': rollback_target,
                'rollback_listing': rollback_listing}
