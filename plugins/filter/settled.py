# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The digest of the plan a run of site.yml carries out (playbooks/stages/settled.yml).

A node recorded as settled (the settled_state module) was converged and verified under one plan:
the inventory's variables and the collection's own files. ``plan_digest`` hashes both, so that a
changed variable, host, group, role default, template or module makes every record stale.
"""
from __future__ import annotations

import hashlib
import json
import os

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import VARIABLE_PREFIXES

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The collection's code and data that a run reads (its tests and docs change nothing on a node).
CODE_FOLDERS = ('roles', 'plugins', 'playbooks')
# The variables of the inventory a run reads: the collection's own (sglang_pd_*, and each role's options
# under the role's name) and where Ansible reaches the host.
OTHER_VARIABLES = ('ansible_host',)
# Variables that steer a run and change nothing on a node (the lock, this comparison itself).
RUN_VARIABLES = ('sglang_pd_skip_settled', 'sglang_pd_break_lock', 'sglang_pd_lock_wait', 'sglang_pd_lock_hosts',
                 'sglang_pd_lock_dir', 'sglang_pd_lock_path')


def _code_digest():
    digest = hashlib.sha256()
    for top in CODE_FOLDERS:
        for folder, dirs, names in os.walk(os.path.join(COLLECTION, top)):
            dirs[:] = sorted(name for name in dirs if name != '__pycache__')
            for name in sorted(names):
                path = os.path.join(folder, name)
                digest.update(os.path.relpath(path, COLLECTION).encode('utf-8', 'surrogateescape') + b'\0')
                with open(path, 'rb') as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def plan_digest(hostvars, groups):
    """sha256 of every host's group memberships and collection variables (evaluated), and the collection's files.

    Only the digest leaves this filter: the variables hashed hold secrets (the router's API keys).
    """
    plan = {'groups': {name: sorted(hosts) for name, hosts in sorted(groups.items())}, 'hosts': {}}
    for host in sorted(groups.get('all', [])):
        values = hostvars[host]
        try:
            plan['hosts'][host] = {name: values[name] for name in sorted(values.keys())
                                   if (name.startswith(VARIABLE_PREFIXES) or name in OTHER_VARIABLES)
                                   and name not in RUN_VARIABLES}
        except Exception as exc:  # pylint: disable=broad-exception-caught
            raise AnsibleFilterError(f'plan_digest: a variable of {host} cannot be evaluated ({type(exc).__name__}) [SGLPD-SVC-006]')
    text = json.dumps(plan, sort_keys=True, default=str)
    return hashlib.sha256(f'{_code_digest()}\n{text}'.encode('utf-8', 'surrogateescape')).hexdigest()


class FilterModule:
    """The plan's digest."""

    def filters(self):
        return {"plan_digest": plan_digest}
