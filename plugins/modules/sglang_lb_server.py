#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_lb_server
short_description: Drain, stop or readmit one router behind the HAProxy balancer
version_added: 0.1.0
description:
  - Sets the admin state of one server of an HAProxy backend through HAProxy's runtime API (its
    stats socket, C(set server BACKEND/SERVER state STATE)), the way the role
    mindverse.sglang_pd.sglang_router_lb runs HAProxy in front of the routers.
  - V(drain) keeps the server's open sessions and gives it no new one; V(maint) gives it none and
    stops its health checks; V(ready) puts it back in rotation (once its health check passes).
  - With O(wait_idle=true) and O(state=drain) or O(state=maint) the module then reads the server's
    current sessions (C(show stat), field C(scur)) until none is left, or fails after O(timeout).
  - The state is read first (C(show servers state BACKEND), its forced maintenance and drain flags)
    and set only when it differs.
author:
  - mindverse infrastructure team (@mindverse)
options:
  socket:
    description:
      - Path of HAProxy's stats socket, declared with C(level admin) (the role's
        C(sglang_router_lb_socket)).
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description:
      - The backend that holds the server (the role's C(sglang_router_lb_backend)).
    type: str
    default: sglang_router
  server:
    description:
      - The server's name in the backend; the role names each router by its inventory host name.
    type: str
    required: true
  state:
    description:
      - The admin state to set.
    type: str
    choices: [ready, drain, maint]
    required: true
  wait_idle:
    description:
      - After setting V(drain) or V(maint), wait until the server holds no session. Ignored for
        V(ready) and in check mode.
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait for the server's sessions to end before failing.
    type: float
    default: 300
attributes:
  check_mode:
    description: Reads the state and sessions and reports what would change, without setting it or waiting.
    support: full
  diff_mode:
    description: Shows the state before and after.
    support: full
notes:
  - The stats socket is root-only; run the task with C(become).
  - A drained server still gets the sessions of clients that stick to it; the balancer the role writes
    has no stickiness, so its sessions only end.
seealso:
  - module: mindverse.sglang_pd.sglang_drain
"""

EXAMPLES = r"""
- name: Drain router-1 at the balancer and wait for its requests to end
  mindverse.sglang_pd.sglang_lb_server:
    server: router-1
    state: drain
    wait_idle: true
    timeout: 600
  delegate_to: "{{ item }}"
  loop: "{{ groups['sglang_router_lb'] }}"

- name: Put router-1 back in rotation
  mindverse.sglang_pd.sglang_lb_server:
    server: router-1
    state: ready
  delegate_to: "{{ item }}"
  loop: "{{ groups['sglang_router_lb'] }}"
"""

RETURN = r"""
backend:
  description: The backend.
  returned: always
  type: str
  sample: sglang_router
server:
  description: The server.
  returned: always
  type: str
  sample: router-1
state_before:
  description: The server's admin state before the task.
  returned: always
  type: str
  sample: ready
state_after:
  description: The server's admin state after the task (in check mode, the state that would be set).
  returned: always
  type: str
  sample: drain
idle:
  description: Whether the server held no session at the last reading.
  returned: always
  type: bool
  sample: true
sessions:
  description: The server's current sessions (C(scur)) at the last reading.
  returned: always
  type: int
  sample: 0
sessions_seen:
  description: The readings of the server's sessions while waiting (at most the last 20), oldest first.
  returned: always
  type: list
  elements: int
  sample: [3, 1, 0]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._haproxy_runtime import STATES, run_server_module


def main():
    module = AnsibleModule(
        argument_spec=dict(
            socket=dict(type='path', default='/run/haproxy/admin.sock'),
            backend=dict(type='str', default='sglang_router'),
            server=dict(type='str', required=True),
            state=dict(type='str', choices=list(STATES), required=True),
            wait_idle=dict(type='bool', default=False),
            timeout=dict(type='float', default=300),
        ),
        supports_check_mode=True,
    )
    run_server_module(module)


if __name__ == '__main__':
    main()
