#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_fleet_lock
short_description: Take or release the lock one run holds while it changes a fleet
version_added: 0.1.0
description:
  - Two runs that change one fleet at the same time (two operators, or a cron job and an
    operator) would restart, register and remove workers under each other. Each run that changes
    the fleet takes a lock first, on the controller and on a strict majority of the lock hosts
    (the playbooks count them); a second run waits for it (O(wait)) or fails, naming who holds
    it since when.
  - The lock is a file created atomically, holding the run's O(run_id) and who holds it. Taking a
    lock this run holds already changes nothing.
  - A lock left by a run that is gone (it failed or was interrupted) is stale. With O(local=true)
    (the controller's lock) a lock of this controller whose process no longer exists is taken
    over. A lock whose run id is in O(stale_run_ids) is taken over too (a lock host's lock of a
    run the controller found gone), and so is a lock host's lock of the same O(controller) and
    O(controller_lock) as this run (that run held the controller's lock file, which this run
    holds now). O(break_lock=true) takes over any lock.
author:
  - mindverse infrastructure team (@mindverse)
options:
  path:
    description:
      - The lock file. Its folder is created (mode 0700) when missing.
    type: path
    required: true
  state:
    description:
      - V(present) takes the lock, V(absent) releases it (only when this run holds it, unless
        O(break_lock=true)).
    type: str
    choices: [present, absent]
    default: present
  run_id:
    description:
      - Identifies this ansible-playbook run (the same on every host of the run).
      - Found by the module with O(local=true) (host, pid and start time of the run's
        ansible-playbook process); required otherwise (pass the controller lock's RV(holder)).
    type: str
  controller:
    description:
      - The controller the run runs on. Found by the module with O(local=true).
    type: str
  user:
    description:
      - Who runs it. With O(local=true) and no value, the user the module runs as.
    type: str
    default: ''
  pid:
    description:
      - The process id of the ansible-playbook run on the controller. Found by the module with
        O(local=true) (the topmost of the module's consecutive C(ansible-playbook) ancestors).
    type: int
  controller_lock:
    description:
      - The run's lock file on the controller. With O(local=true) and no value, O(path).
      - On a lock host, a lock of the same O(controller) and O(controller_lock) held by another
        run is taken over.
    type: str
  playbook:
    description:
      - The playbook the run runs, for the message another run shows.
    type: str
    default: ''
  local:
    description:
      - The lock file is on the controller itself, where a holder's process can be looked up.
    type: bool
    default: false
  stale_run_ids:
    description:
      - Run ids known to be gone; a lock they hold is taken over.
    type: list
    elements: str
    default: []
  break_lock:
    description:
      - Take over (or release) the lock whoever holds it.
    type: bool
    default: false
  wait:
    description:
      - Seconds to wait for another run's lock before failing.
    type: float
    default: 0
attributes:
  check_mode:
    description: Reports whether the lock would be taken or released, without writing it.
    support: full
  diff_mode:
    description: No diff is returned.
    support: none
notes:
  - Releasing at the end of a run is done by the playbooks; a run that fails leaves its lock,
    which the next run on the same controller takes over.
  - Counting the lock hosts a run holds, and releasing what it took short of a majority, is done
    by the playbooks too (C(playbooks/stages/lock.yml)).
"""

EXAMPLES = r"""
- name: Take the controller's lock (the run is found from the module's process)
  mindverse.sglang_pd.sglang_fleet_lock:
    path: ~/.cache/sglang-pd/fleet.lock
    local: true
    user: ops
    playbook: site.yml
  delegate_to: localhost
  register: controller_lock

- name: Take the fleet lock on a lock host, for the same run
  mindverse.sglang_pd.sglang_fleet_lock:
    path: /var/lib/sglang-pd/fleet.lock
    run_id: "{{ controller_lock.holder.run_id }}"
    controller: "{{ controller_lock.holder.controller }}"
    controller_lock: "{{ controller_lock.holder.controller_lock }}"
    user: "{{ controller_lock.holder.user }}"
    pid: "{{ controller_lock.holder.pid }}"
    playbook: site.yml
    stale_run_ids: "{{ [controller_lock.taken_over.run_id] if controller_lock.taken_over else [] }}"

- name: Release it at the end of the run
  mindverse.sglang_pd.sglang_fleet_lock:
    path: /var/lib/sglang-pd/fleet.lock
    state: absent
    run_id: "{{ controller_lock.holder.run_id }}"
    controller: "{{ controller_lock.holder.controller }}"
    pid: "{{ controller_lock.holder.pid }}"
"""

RETURN = r"""
holder:
  description: Who holds the lock now (V(present)), or who held it (V(absent)); null when nobody.
  returned: always
  type: dict
  sample: {"run_id": "ctl-01:4242:1764560000", "controller": "ctl-01", "user": "ops", "pid": 4242,
           "playbook": "site.yml", "controller_lock": "/home/ops/.cache/sglang-pd/router-1.lock",
           "since": 1764560000.5}
taken_over:
  description: The stale lock this run took over, with C(reason); null when there was none.
  returned: when O(state=present)
  type: dict
  sample: {"run_id": "ctl-01:4000:1764550000", "controller": "ctl-01", "pid": 4000, "reason": "its run is gone"}
"""

import getpass
import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._fleet_lock import HOLDER_KEYS, FleetLock, LockError, describe, find_run


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            state=dict(type='str', default='present', choices=['present', 'absent']),
            run_id=dict(type='str'),
            controller=dict(type='str'),
            controller_lock=dict(type='str'),
            user=dict(type='str', default=''),
            pid=dict(type='int'),
            playbook=dict(type='str', default=''),
            local=dict(type='bool', default=False),
            stale_run_ids=dict(type='list', elements='str', default=[]),
            break_lock=dict(type='bool', default=False),
            wait=dict(type='float', default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p['local'] and not p['run_id']:
        p['pid'], p['run_id'] = find_run()
        p['controller'] = p['controller'] or socket.gethostname()
        p['user'] = p['user'] or getpass.getuser()
        p['controller_lock'] = p['controller_lock'] or p['path']
        if not p['run_id']:
            module.fail_json(msg='No ansible-playbook process above this module: give run_id, controller and pid. [SGLPD-LCK-001]')
    missing = [name for name in ('run_id', 'controller', 'pid') if p[name] in (None, '')]
    if missing:
        module.fail_json(msg='Give %s (only a lock with local=true finds them itself). [SGLPD-LCK-001]' % ', '.join(missing))
    lock = FleetLock(p['path'], dict((k, p[k]) for k in HOLDER_KEYS),
                     local=p['local'], stale_run_ids=p['stale_run_ids'], break_lock=p['break_lock'],
                     wait=p['wait'], check_mode=module.check_mode)
    try:
        result = lock.acquire() if p['state'] == 'present' else lock.release()
    except (LockError, OSError) as exc:
        module.fail_json(msg='%s [SGLPD-LCK-002]' % getattr(exc, 'msg', exc), holder=getattr(exc, 'holder', None))
    if result.get('taken_over'):
        module.warn('Took over the fleet lock of %s: %s.' % (describe(result['taken_over']), result['taken_over']['reason']))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
