# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Runs the file_set module, and adds what it was asked for to the host's managed state.

A run of site.yml ends by recording, on each node, what it left there (playbooks/stages/record_settled.yml,
the settled_state module). The files, folders, removed paths and units it checks come from here:
every file_set call on a node adds the desired state it was given (each file's sha256 and mode,
never a secret file's content or digest) to the host fact ``__sglang_pd_managed``. Calls with
``dest`` (a render on the controller) and calls delegated to another host add nothing.
"""

from __future__ import annotations

import hashlib

from ansible.plugins.action import ActionBase

FACT = '__sglang_pd_managed'


def merged(managed, args):
    """MANAGED (the host's fact so far, or None) with the desired state of one file_set call's ARGS."""
    result = {'files': {}, 'directories': {}, 'absent': [], 'units': []}
    for key, value in (managed or {}).items():
        result[key] = dict(value) if isinstance(value, dict) else list(value)
    owner = {'owner': args.get('owner'), 'group': args.get('group')}
    for secret, option in ((False, 'files'), (True, 'secret_files')):
        for entry in args.get(option) or []:
            desired = dict(owner, mode=str(entry.get('mode') or ('0600' if secret else '0644')), secret=secret)
            if not secret:
                desired['sha256'] = hashlib.sha256(str(entry['content']).encode('utf-8')).hexdigest()
            result['files'][entry['path']] = desired
            if entry['path'] in result['absent']:
                result['absent'].remove(entry['path'])
    for entry in args.get('directories') or []:
        result['directories'][entry['path']] = dict(owner, mode=str(entry.get('mode') or '0755'))
    for path in args.get('absent') or []:
        result['files'].pop(path, None)
        if path not in result['absent']:
            result['absent'].append(path)
    for unit in args.get('units') or []:
        if unit not in result['units']:
            result['units'].append(unit)
    return result


class ActionModule(ActionBase):
    """file_set, noting its desired state in the host fact ``__sglang_pd_managed``."""

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result.update(self._execute_module(module_name='mindverse.sglang_pd.file_set', module_args=self._task.args,
                                           task_vars=task_vars))
        delegated = self._task.delegate_to and self._task.delegate_to != task_vars.get('inventory_hostname')
        if result.get('failed') or self._task.args.get('dest') or delegated:
            return result
        result['ansible_facts'] = {FACT: merged(task_vars.get(FACT), self._task.args)}
        return result
