#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: settled_state
short_description: Record what a verified run left on a node, and tell whether the node still holds it
version_added: 0.1.0
description:
  - A run of C(site.yml) that converged and verified the fleet ends by recording, on each node, what it left there
    (O(state=recorded)). The next run first compares each node with its record (O(state=compared)), in one call per
    node. When the plan is the one recorded and every node still holds what was recorded, that run has nothing to
    change, and C(site.yml) goes straight to verifying the fleet (docs/scaling.md).
  - What is read is the node itself, never the record's word for it. For every file, folder, removed path and
    systemd unit a run wrote through M(mindverse.sglang_pd.file_set) (the host fact C(__sglang_pd_managed) its action
    plugin keeps), it reads each file's sha256, mode and owner, a secret file's size and modification time (its
    content is read by no one), each folder's mode and owner, whether a removed path came back, each unit's state. Also the
    listing (names, sizes, modification times) of each model folder of O(managed), the image ID and state of every
    container labelled C(org.mindverse.sglang_pd.service), and the rules (without counters) of every nftables table
    named C(sglang*).
  - O(state=recorded) records only a node that holds what O(managed) asks for (files with that content, units
    active and enabled); otherwise it records nothing and says why in RV(differences).
  - O(state=compared) removes a record the node itself no longer matches (not in check mode), so a run that fails
    before recording leaves none behind. A record made under another plan is kept and the compare reports no change,
    since its digest keeps every run of another plan from skipping, and a run of the recorded plan compares the node
    again.
    O(state=absent) removes the record.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Compares and reports; records and removes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  state:
    description:
      - V(compared) tells whether the node holds what its record says; V(recorded) records what it holds now;
        V(absent) removes the record.
    type: str
    choices: [compared, recorded, absent]
    default: compared
  path:
    description:
      - The record's file on the node (mode C(0600); its folder is created when missing, mode C(0700)).
    type: path
    default: /var/lib/sglang-pd/settled.json
  digest:
    description:
      - The digest of the plan (the inventory's variables and the collection's files,
        the C(mindverse.sglang_pd.plan_digest) filter). A record made under another plan does not match.
      - Required with O(state=compared) and O(state=recorded).
    type: str
  managed:
    description:
      - With O(state=recorded), what the run asked the node to hold, as the C(file_set) action plugin collects it.
    type: dict
    default: {}
    suboptions:
      files:
        description: Path to C(sha256) (absent for a secret file), C(mode), C(owner), C(group), C(secret).
        type: dict
        default: {}
      directories:
        description: Path to C(mode), C(owner), C(group).
        type: dict
        default: {}
      absent:
        description: Paths the run removed.
        type: list
        elements: str
        default: []
      units:
        description: systemd units that run, enabled.
        type: list
        elements: str
        default: []
      trees:
        description: Model folders whose listing is recorded.
        type: list
        elements: str
        default: []
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Compare the node with what the last verified run left
  mindverse.sglang_pd.settled_state:
    digest: "{{ __sglang_pd_plan_digest }}"
  register: settled

- name: Record what the node holds, once the fleet is verified
  mindverse.sglang_pd.settled_state:
    state: recorded
    digest: "{{ __sglang_pd_plan_digest }}"
    managed: "{{ __sglang_pd_managed | default({}) }}"
"""

RETURN = r"""
settled:
  description:
    - O(state=compared) - the record was made under this plan and the node holds all that it records.
    - O(state=recorded) - the node held what O(managed) asks for, and is recorded.
  returned: always
  type: bool
  sample: true
differences:
  description:
    - Why the node is not settled, one line each (paths, unit and service names; never a file's content).
  returned: always
  type: list
  elements: str
  sample: [unit sglang-decode changed, file /etc/sglang-pd/sglang-decode.sh changed]
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _settled
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._atomic_file import write_atomically

VERSION = 1


def load(path):
    """The record at PATH, or None when there is none (or it cannot be read)."""
    try:
        with open(path, encoding='utf-8') as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get('version') == VERSION else None


def save(path, record):
    """Write RECORD to PATH (0600), through a temporary file renamed over it."""
    write_atomically(path, json.dumps(record, sort_keys=True), 0o600, folder_mode=0o700)


def forget(module, path):
    """Remove the record at PATH (not in check mode); True when there was one."""
    if not os.path.lexists(path):
        return False
    if not module.check_mode:
        os.unlink(path)
    return True


def compared(module, path, digest):
    """(settled, differences, removed) of the node against its record; a record the node no longer matches is
    removed, one made under another plan kept."""
    record = load(path)
    if record is None:
        return False, ['no record of a verified site.yml run'], forget(module, path)
    if record.get('digest') != digest:
        return False, ['the plan changed since the recorded run (inventory variables or collection files)'], False
    before = record['observed']
    now = _settled.observe(module, {p: bool((s or {}).get('secret')) for p, s in before['files'].items()},
                           before['directories'], before['absent'], before['units'], before['trees'])
    differences = _settled.changes(before, now)
    return not differences, differences, bool(differences) and forget(module, path)


def recorded(module, path, digest, managed):
    """(settled, differences, changed): the node's state recorded under DIGEST, when it holds what MANAGED asks
    for; changed when the record is new or differs from the one there."""
    files = {p: bool(entry.get('secret')) for p, entry in managed['files'].items()}
    now = _settled.observe(module, files, managed['directories'], managed['absent'], managed['units'],
                           managed['trees'])
    differences = _settled.unlike_desired(now, managed)
    if differences:
        return False, differences, forget(module, path)
    record = {'version': VERSION, 'digest': digest, 'observed': now}
    if load(path) == record:
        return True, [], False
    if not module.check_mode:
        save(path, record)
    return True, [], True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type='str', choices=['compared', 'recorded', 'absent'], default='compared'),
            path=dict(type='path', default='/var/lib/sglang-pd/settled.json'),
            digest=dict(type='str'),
            managed=dict(type='dict', default={}, options=dict(
                files=dict(type='dict', default={}),
                directories=dict(type='dict', default={}),
                absent=dict(type='list', elements='str', default=[]),
                units=dict(type='list', elements='str', default=[]),
                trees=dict(type='list', elements='str', default=[]),
            )),
        ),
        required_if=[('state', 'compared', ['digest']), ('state', 'recorded', ['digest'])],
        supports_check_mode=True,
    )
    state, path, digest = module.params['state'], module.params['path'], module.params['digest']
    if state == 'absent':
        module.exit_json(changed=forget(module, path), settled=False, differences=[])
    try:
        if state == 'compared':
            settled, differences, changed = compared(module, path, digest)
        else:
            settled, differences, changed = recorded(module, path, digest, module.params['managed'])
    except OSError as exc:
        module.fail_json(msg=f"Cannot {'compare' if state == 'compared' else 'record'} the node at {path}: "
                             f"{exc.strerror or exc} [SGLPD-SVC-005]")
    module.exit_json(changed=changed, settled=settled, differences=differences)


if __name__ == '__main__':
    main()
