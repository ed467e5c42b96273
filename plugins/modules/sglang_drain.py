#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_drain
short_description: Wait until an SGLang server has no request in flight
version_added: 0.1.0
description:
  - Polls the load an SGLang server reports until it has read zero requests in flight O(settle)
    times in a row, or O(timeout) passes. Use it after taking a worker out of the router and
    before stopping it, so no request is cut.
  - C(GET /get_load) answers one entry per data-parallel rank; the module sums C(num_reqs) and
    C(num_waiting_reqs).
  - C(GET /metrics) (servers started with C(--enable-metrics)) is read as Prometheus text; the
    module sums the gauges named in O(metrics) over all their label sets.
  - A server that refuses the connection (nothing listens on its port) has nothing in flight,
    so the module succeeds with RV(reachable=false) and a warning.
  - A server that does not answer in time, or whose answer breaks off, may be hung with
    requests in flight. It is read again until O(timeout), and then the module fails (a drain
    whose load cannot be read fails closed), whatever O(fail_on_timeout) says.
author:
  - mindverse infrastructure team (@mindverse)
extends_documentation_fragment:
  - mindverse.sglang_pd.http_options
options:
  url:
    description:
      - Base URL of the SGLang server, for example V(http://10.0.0.12:30200).
    type: str
    required: true
  source:
    description:
      - Where the load is read. V(auto) tries V(get_load), then V(metrics), and keeps the first
        that answers.
    type: str
    choices: [auto, get_load, metrics]
    default: auto
  metrics:
    description:
      - Gauges summed when the load is read from C(/metrics).
    type: list
    elements: str
    default: ['sglang:num_running_reqs', 'sglang:num_queue_reqs']
  timeout:
    description:
      - Seconds to wait in total.
    type: float
    default: 300
  interval:
    description:
      - Seconds between two readings.
    type: float
    default: 0.5
  settle:
    description:
      - Readings of zero in a row needed to call the server drained (a request the router sent
        just before the worker left it may arrive a moment later).
    type: int
    default: 3
  request_timeout:
    description:
      - Timeout in seconds of each request.
    type: float
    default: 5
  fail_on_timeout:
    description:
      - Fail when requests are still in flight at O(timeout). With V(false) the module warns and
        returns RV(drained=false), so the caller can go on (stopping the server then lets it finish
        what it can within its stop timeout).
    type: bool
    default: true
attributes:
  check_mode:
    description: Reads the load once and reports it, without waiting.
    support: full
  diff_mode:
    description: Nothing changes, so there is no diff.
    support: none
notes:
  - The module changes nothing; it only waits. Take the worker out of the router first
    (M(mindverse.sglang_pd.sglang_router_workers) with O(mindverse.sglang_pd.sglang_router_workers#module:state=absent)).
seealso:
  - module: mindverse.sglang_pd.sglang_router_workers
  - module: mindverse.sglang_pd.sglang_health
"""

EXAMPLES = r"""
- name: Take a decode server out of the router
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    state: absent
    workers:
      - url: http://10.0.0.13:30200
        worker_type: decode

- name: Wait until its requests have finished (at most 5 minutes)
  mindverse.sglang_pd.sglang_drain:
    url: http://10.0.0.13:30200
    timeout: 300

- name: Read the load from Prometheus metrics, and go on after the timeout
  mindverse.sglang_pd.sglang_drain:
    url: http://10.0.0.13:30200
    source: metrics
    timeout: 60
    fail_on_timeout: false
"""

RETURN = r"""
url:
  description: The server's base URL.
  returned: always
  type: str
  sample: http://10.0.0.13:30200
drained:
  description: Whether the server read zero requests in flight O(settle) times in a row (in check mode, at the one reading).
  returned: always
  type: bool
  sample: true
source:
  description: Where the load was read, V(get_load) or V(metrics); null when the server did not answer.
  returned: always
  type: str
  sample: get_load
in_flight:
  description: Requests in flight at the last reading.
  returned: always
  type: int
  sample: 0
max_in_flight:
  description: Largest number of requests in flight seen while waiting.
  returned: always
  type: int
  sample: 4
readings:
  description: The last readings (at most 20), oldest first.
  returned: always
  type: list
  elements: int
  sample: [4, 2, 1, 0, 0, 0]
polls:
  description: Number of readings.
  returned: always
  type: int
  sample: 6
elapsed:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 2.51
reachable:
  description: Whether the server answered; false means nothing listened (drained) or it never answered (failed).
  returned: always
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._drain import DEFAULT_METRICS, run_drain_module
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HTTP_ARGUMENT_SPEC


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **HTTP_ARGUMENT_SPEC,
            url=dict(type='str', required=True),
            source=dict(type='str', default='auto', choices=['auto', 'get_load', 'metrics']),
            metrics=dict(type='list', elements='str', default=list(DEFAULT_METRICS)),
            timeout=dict(type='float', default=300),
            interval=dict(type='float', default=0.5),
            settle=dict(type='int', default=3),
            request_timeout=dict(type='float', default=5),
            fail_on_timeout=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    run_drain_module(module)


if __name__ == '__main__':
    main()
