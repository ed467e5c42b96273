#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_workers
short_description: Query, register and remove the workers of an sglang-router
version_added: 0.1.0
description:
  - Reads the worker list of an sglang-router and, on routers 0.2 or later, registers or removes
    prefill, decode and regular workers at run time.
  - The API is detected. C(GET /workers) answering a JSON C(workers) list means the C(workers) API
    (routers 0.2 or later); otherwise C(GET /list_workers) answering a JSON C(urls) list means the
    legacy 0.1.x API, whose worker types are unknown and which cannot change PD workers at run time.
  - New workers are registered with C(POST /workers); the router answers 202 and finishes the
    registration in the background, so the module polls C(GET /workers) until they are listed,
    for at most O(wait_timeout) seconds.
  - Workers are removed with C(DELETE /workers/{id}), where C(id) is the UUID listed by
    C(GET /workers) on 0.3.x routers and the percent-encoded worker URL on 0.2.4.
  - URLs are compared without a trailing slash.
author:
  - mindverse infrastructure team (@mindverse)
options:
  url:
    description:
      - Base URL of the router, for example V(http://10.0.0.10:8000).
    type: str
    required: true
  api_key:
    description:
      - "API key sent as C(Authorization: Bearer <api_key>) (the router's C(--api-key), or a
        control-plane key on 0.3.x routers)."
    type: str
  timeout:
    description:
      - Timeout in seconds of each HTTP request.
    type: float
    default: 10
  validate_certs:
    description:
      - Verify TLS certificates of an HTTPS router URL.
    type: bool
    default: true
  state:
    description:
      - V(query) only reads the worker list.
      - V(present) registers every worker of O(workers) that the router does not list. A listed
        worker whose type (or, for prefill, bootstrap port) differs is removed and registered again.
      - V(absent) removes every worker of O(workers) that the router lists (matched by URL only).
      - V(exact) does what V(present) does and also removes every listed worker that is not in O(workers).
      - Anything but V(query) fails on a legacy 0.1.x router.
    type: str
    choices: [query, present, absent, exact]
    default: query
  workers:
    description:
      - The workers to converge. Ignored when O(state=query).
      - With O(state=exact) an empty list removes every worker.
    type: list
    elements: dict
    suboptions:
      url:
        description:
          - Worker URL as the router should reach it, for example V(http://10.0.0.11:30100).
          - Register prefill servers by an address decode nodes can reach; the router derives the
            bootstrap host from it.
        type: str
        required: true
      worker_type:
        description:
          - Role of the worker.
        type: str
        required: true
        choices: [prefill, decode, regular]
      bootstrap_port:
        description:
          - Disaggregation bootstrap port of a prefill server (its C(--disaggregation-bootstrap-port),
            8998 by default). Ignored for other worker types. Omitted from the request when unset.
        type: int
  wait_timeout:
    description:
      - Seconds to wait, after registering or removing workers, until C(GET /workers) reports the
        change. V(0) does not wait.
    type: float
    default: 120
  metrics_url:
    description:
      - Base URL of the router's Prometheus endpoint (its C(--prometheus-host) and C(--prometheus-port)),
        for example V(http://10.0.0.10:29000).
      - When set, each worker of RV(workers) also carries C(circuit_breaker), the router's own state of
        its circuit breaker read from C(smg_worker_cb_state) (V(closed), V(open), V(half_open), or
        V(unknown) when the router does not export it), and RV(open_circuits) lists the workers whose
        breaker is not closed. The router's C(GET /workers) does not show the breaker.
    type: str
  api:
    description:
      - Router API to use. V(auto) detects it; V(workers) requires C(GET /workers) (routers 0.2 or
        later); V(legacy) reads C(GET /list_workers) (routers 0.1.x).
    type: str
    choices: [auto, workers, legacy]
    default: auto
attributes:
  check_mode:
    description: Computes and returns what would change (C(changed), C(added), C(removed), C(diff)) without sending POST or DELETE.
    support: full
  diff_mode:
    description: Returns the worker list before and after as C(diff).
    support: full
notes:
  - A worker that is registered but fails its health checks may never be listed as healthy;
    use M(mindverse.sglang_pd.sglang_health) on each server's C(/health_generate) as well.
seealso:
  - module: mindverse.sglang_pd.sglang_health
  - module: mindverse.sglang_pd.sglang_chat_probe
"""

EXAMPLES = r"""
- name: Read the router's workers
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
  register: router

- name: Require two workers
  ansible.builtin.assert:
    that:
      - router.counts.prefill >= 1
      - router.counts.decode >= 1
    fail_msg: "Router lists {{ router.counts }}"

- name: Register a second decode server
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    api_key: "{{ sglang_router_api_key }}"
    state: present
    workers:
      - url: http://10.0.0.13:30200
        worker_type: decode

- name: Make the router list exactly these workers
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    state: exact
    workers:
      - url: http://10.0.0.11:30100
        worker_type: prefill
        bootstrap_port: 8998
      - url: http://10.0.0.12:30200
        worker_type: decode
    wait_timeout: 300

- name: Read the workers with the state of their circuit breakers
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    api_key: "{{ sglang_router_api_key }}"
    metrics_url: http://10.0.0.10:29000
  register: router_state

- name: Take a decode server out of rotation
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    state: absent
    workers:
      - url: http://10.0.0.13:30200
        worker_type: decode
"""

RETURN = r"""
api:
  description: The router API that was used, V(workers) (routers 0.2 or later) or V(legacy) (0.1.x).
  returned: always, when the router answered
  type: str
  sample: workers
workers:
  description:
    - The workers the router lists (after the change, unless in check mode).
    - On a legacy router C(worker_type) is V(unknown) and C(id), C(is_healthy), C(bootstrap_port) are null.
    - C(id) is the identifier used for C(DELETE /workers/{id}) (a UUID on 0.3.x, the percent-encoded URL on 0.2.4).
    - With O(metrics_url), C(circuit_breaker) is the state of the worker's circuit breaker in the router.
  returned: always, when the router answered
  type: list
  elements: dict
  sample:
    - url: http://10.0.0.11:30100
      worker_type: prefill
      is_healthy: true
      bootstrap_port: 8998
      id: 0b5c1f4e-3d2a-4c1e-9f57-2b8f1c0d9a11
    - url: http://10.0.0.12:30200
      worker_type: decode
      is_healthy: true
      bootstrap_port: null
      id: 6f0e2d9c-8a47-4b3e-a1d2-5c9e7f3b2a40
open_circuits:
  description: URLs of the workers whose circuit breaker in the router is open or half-open.
  returned: when O(metrics_url) is set
  type: list
  elements: str
  sample: ["http://10.0.0.13:30200"]
counts:
  description: Number of listed workers per type, plus C(unknown) (legacy routers) and C(total).
  returned: always, when the router answered
  type: dict
  sample: {"prefill": 1, "decode": 1, "regular": 0, "unknown": 0, "total": 2}
healthy_counts:
  description: Like RV(counts), counting only workers the router reports as healthy.
  returned: always, when the router answered
  type: dict
  sample: {"prefill": 1, "decode": 1, "regular": 0, "unknown": 0, "total": 2}
added:
  description: Workers registered (or, in check mode, that would be registered).
  returned: when O(state) is not V(query)
  type: list
  elements: dict
  sample: [{"url": "http://10.0.0.13:30200", "worker_type": "decode"}]
removed:
  description: Workers removed (or, in check mode, that would be removed).
  returned: when O(state) is not V(query)
  type: list
  elements: dict
  sample: [{"url": "http://10.0.0.14:30200", "worker_type": "decode"}]
diff:
  description: Worker lists (URL, type, bootstrap port) before and after the change.
  returned: when O(state) is not V(query)
  type: dict
  sample:
    before: [{"url": "http://10.0.0.11:30100", "worker_type": "prefill", "bootstrap_port": 8998}]
    after:
      - {"url": "http://10.0.0.11:30100", "worker_type": "prefill", "bootstrap_port": 8998}
      - {"url": "http://10.0.0.12:30200", "worker_type": "decode"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._router_api import run_router_workers_module


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type='str', required=True),
            api_key=dict(type='str', no_log=True),
            timeout=dict(type='float', default=10),
            validate_certs=dict(type='bool', default=True),
            state=dict(type='str', default='query', choices=['query', 'present', 'absent', 'exact']),
            workers=dict(
                type='list',
                elements='dict',
                options=dict(
                    url=dict(type='str', required=True),
                    worker_type=dict(type='str', required=True, choices=['prefill', 'decode', 'regular']),
                    bootstrap_port=dict(type='int'),
                ),
            ),
            wait_timeout=dict(type='float', default=120),
            api=dict(type='str', default='auto', choices=['auto', 'workers', 'legacy']),
            metrics_url=dict(type='str'),
        ),
        required_if=[
            ('state', 'present', ['workers']),
            ('state', 'absent', ['workers']),
            ('state', 'exact', ['workers']),
        ],
        supports_check_mode=True,
    )
    run_router_workers_module(module)


if __name__ == '__main__':
    main()
