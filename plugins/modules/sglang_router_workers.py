#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_router_workers
short_description: Query, register and remove the workers of an sglang-router or SMG router
version_added: 0.1.0
description:
  - Reads the worker list of an sglang-router or of its successor SMG (the C(smg) package) and, on
    routers 0.2 or later, registers or removes prefill, decode and regular workers at run time.
  - The API is detected. C(GET /workers) answering a JSON C(workers) list means the C(workers) API
    (routers 0.2 or later); otherwise C(GET /list_workers) answering a JSON C(urls) list means the
    legacy 0.1.x API, whose worker types are unknown and which cannot change PD workers at run time.
  - New workers are registered with C(POST /workers); the router answers 202 and finishes the
    registration in the background, so the module polls C(GET /workers) until they are listed,
    for at most O(wait_timeout) seconds.
  - When the 202 answer names the registration (C(worker_id) and C(location), as SMG and sglang-router
    0.3.2 do), the module also follows it with C(GET /workers/{id}) and fails as soon as it ends
    without a worker, with the router's reason (its failed C(job_status)), or, on SMG, which drops a
    failed registration and logs its reason only in its own log, saying that it was dropped. A
    registration still running when O(wait_timeout) ends is returned in RV(pending) with its job status.
  - SMG answers a C(POST /workers) of a URL whose registration still runs with 409
    C(WORKER_CREATE_IN_PROGRESS); the module then follows that registration like its own.
  - Workers are removed with C(DELETE /workers/{id}), where C(id) is the UUID listed by
    C(GET /workers) on 0.3.x routers and SMG, and the percent-encoded worker URL on 0.2.4.
  - URLs are compared without a trailing slash.
author:
  - mindverse infrastructure team (@mindverse)
extends_documentation_fragment:
  - mindverse.sglang_pd.http_options
options:
  url:
    description:
      - Base URL of the router, for example V(http://10.0.0.10:8000).
    type: str
    required: true
  api_key:
    description:
      - "API key sent as C(Authorization: Bearer <api_key>) (the router's C(--api-key), or a
        control-plane key on 0.3.x routers and SMG)."
      - With control-plane keys (C(--control-plane-api-keys id:name:role:key)), reading the workers
        takes a key of any role, registering and removing them a key with the C(admin) role.
    type: str
  worker_api_key:
    description:
      - API key the router presents to each worker it registers (C(api_key) of C(POST /workers)),
        for workers started with C(--api-key).
      - SMG presents its own C(--api-key) only to the workers it starts with; without this a
        worker that requires a key answers SMG's model and server-info probes with 401 and its
        registration never ends. sglang-router 0.3 takes it as well.
      - Never returned or logged.
    type: str
  timeout:
    description:
      - Timeout in seconds of each HTTP request.
    type: float
    default: 10
  state:
    description:
      - V(query) only reads the worker list.
      - V(present) registers every worker of O(workers) that the router does not list. A listed
        worker whose type (or, for prefill, bootstrap port) differs is removed and registered again.
      - V(absent) removes every worker of O(workers) that the router lists (matched by URL only), and
        every worker of O(workers) with an C(id) whose registration is still running (see
        O(workers[].id)).
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
      id:
        description:
          - The id the router named for the registration of this worker (a UUID, as RV(pending) returns
            it). Read only with O(state=absent), for a worker that the router does not list.
          - A router lists a worker only once its registration has finished, so a worker still being
            registered can only be found by this id. The module waits until that registration ends and
            removes the worker it registered; a registration that ends without a worker needs nothing
            removed. SMG cannot remove a worker while it registers it, so a registration still running
            when O(wait_timeout) ends fails the task (re-run it later).
        type: str
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
  - SMG keeps probing a worker it cannot reach until its C(--worker-startup-timeout-secs) (1800 s by
    default) before it drops the registration, so with a shorter O(wait_timeout) such a worker ends in
    RV(pending), not in RV(registration_failures).
  - O(state=exact) cannot remove a registration still running that O(workers) does not list, since the
    router does not list it either; remove it with O(state=absent) and its O(workers[].id).
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

- name: Register a second decode server, started with --api-key, with an admin control-plane key
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    api_key: "{{ router_admin_key }}"
    worker_api_key: "{{ sglang_router_api_key }}"
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

- name: Register a decode server without waiting for the router
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    api_key: "{{ sglang_router_api_key }}"
    state: present
    workers:
      - url: http://10.0.0.15:30200
        worker_type: decode
    wait_timeout: 0
  register: registration

- name: Withdraw that registration, even while the router is still registering the server
  mindverse.sglang_pd.sglang_router_workers:
    url: http://10.0.0.10:8000
    api_key: "{{ sglang_router_api_key }}"
    state: absent
    workers: "{{ registration.pending | ansible.utils.remove_keys(target=['job_status']) }}"
  when: registration.pending | length > 0

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
pending:
  description:
    - Registrations the router accepted and names an id for (SMG, sglang-router 0.3.2) that had not finished
      when the module returned, because O(wait_timeout) ended or is V(0) (or, with O(state=absent), that
      were still running when the module looked them up).
    - C(id) is the router's id of the registration (for O(workers[].id) and C(GET /workers/{id})),
      C(job_status) the router's C(job_status) of it (C(job_type), C(status) V(pending) or
      V(processing), C(message), C(timestamp)), or null when it showed none.
  returned: when O(state) is not V(query)
  type: list
  elements: dict
  sample:
    - url: http://10.0.0.13:30200
      worker_type: decode
      id: 01a238d8-238c-75df-b713-2af8caa67220
      job_status: {"job_type": "AddWorker", "worker_url": "http://10.0.0.13:30200", "status": "processing",
                   "message": null, "timestamp": 1796250018}
registration_failures:
  description:
    - Registrations the router accepted but ended without a worker; the task fails when there is one.
    - C(reason) is the router's message of the failed job (sglang-router 0.3.2 keeps it in C(job_status)),
      or, on SMG, which drops a failed registration (C(GET /workers/{id}) answers 404) and writes its reason
      only to its own log, a text saying so.
  returned: when O(state) is not V(query)
  type: list
  elements: dict
  sample:
    - url: http://10.0.0.13:30200
      worker_type: decode
      id: cfd0e99e-d6ab-4866-8c41-aa64979c3d63
      reason: >-
        Workflow failed at step detect_connection_mode: Step failed: detect_connection_mode - Both HTTP and
        gRPC health checks failed for http://10.0.0.13:30200: HTTP: Health check failed: error sending
        request for url (http://10.0.0.13:30200/health), gRPC: gRPC failed (tried SGLang and vLLM): gRPC
        connection failed: transport error
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

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HTTP_ARGUMENT_SPEC
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._router_api import run_router_workers_module


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **HTTP_ARGUMENT_SPEC,
            url=dict(type='str', required=True),
            worker_api_key=dict(type='str', no_log=True),
            timeout=dict(type='float', default=10),
            state=dict(type='str', default='query', choices=['query', 'present', 'absent', 'exact']),
            workers=dict(
                type='list',
                elements='dict',
                options=dict(
                    url=dict(type='str', required=True),
                    worker_type=dict(type='str', required=True, choices=['prefill', 'decode', 'regular']),
                    bootstrap_port=dict(type='int'),
                    id=dict(type='str'),
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
