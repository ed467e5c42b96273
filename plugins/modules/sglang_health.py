#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_health
short_description: Wait until an SGLang server or router answers an HTTP health check
version_added: 0.1.0
description:
  - Polls one HTTP endpoint (typically a worker's C(/health_generate) or the router's C(/readiness))
    until it answers with one of the expected status codes, or fails once the total deadline passes.
  - With O(urls) it polls every URL of the list at the same time, each as O(url) alone would be (up to 32 at
    once), and fails when any of them fails, naming each; a fleet's workers cost one call, not one each.
  - Between attempts it backs off exponentially, starting at O(interval) and doubling after each failed attempt.
    Until an attempt gets an HTTP answer (the connection is refused or times out, as while a server loads its
    model) the wait is capped at O(refused_max_interval). From the first HTTP answer on, whatever its status
    (a server warming up answers 503), it is capped at O(max_interval), also if the endpoint later stops answering.
  - So an endpoint that has answered once is seen healthy at most O(max_interval) after it turns healthy;
    one that goes from refusing connections straight to healthy, at most O(refused_max_interval) after.
  - When the next wait would pass the deadline, it waits until the deadline and tries one last time.
  - The module only reads; it never reports a change and runs in check mode as well.
author:
  - mindverse infrastructure team (@mindverse)
extends_documentation_fragment:
  - mindverse.sglang_pd.http_options
  - mindverse.sglang_pd.read_only
options:
  url:
    description:
      - Full URL to poll, for example V(http://10.0.0.11:30100/health_generate).
      - Exactly one of O(url) and O(urls) is required.
    type: str
  urls:
    description:
      - URLs to poll at the same time, each with the options below and its own deadline.
    type: list
    elements: str
  method:
    description:
      - HTTP method of each attempt.
    type: str
    choices: [GET, POST]
    default: GET
  body:
    description:
      - "Request body. Dictionaries and lists are sent as JSON; a string is sent unchanged
        with C(Content-Type: application/json)."
    type: raw
  status_code:
    description:
      - HTTP status codes that count as healthy.
    type: list
    elements: int
    default: [200]
  timeout:
    description:
      - Total deadline in seconds for all attempts together.
    type: float
    default: 600
  request_timeout:
    description:
      - Timeout in seconds of a single request. It is cut to the time left before the deadline,
        but not below one second (or O(request_timeout) if that is smaller).
    type: float
    default: 10
  initial_delay:
    description:
      - Seconds to wait before the first attempt.
    type: float
    default: 0
  interval:
    description:
      - Seconds to wait after the first failed attempt; the wait doubles after each further failure.
    type: float
    default: 1
  max_interval:
    description:
      - Upper bound in seconds of the wait between two attempts once any attempt got an HTTP answer.
      - The most the module can return late after the endpoint turns healthy.
    type: float
    default: 0.5
  refused_max_interval:
    description:
      - Upper bound in seconds of the wait between two attempts while no attempt got an HTTP answer yet
        (connection refused, timed out, TLS or DNS error).
    type: float
    default: 2
  headers:
    description:
      - Extra HTTP headers sent with every attempt.
    type: dict
notes:
  - SGLang servers answer C(/health_generate) with 503 while they start; the router answers
    C(/readiness) with 503 until one healthy prefill and one healthy decode server are registered.
seealso:
  - module: mindverse.sglang_pd.sglang_chat_probe
  - module: mindverse.sglang_pd.sglang_router_workers
"""

EXAMPLES = r"""
- name: Wait until the prefill server generates a token
  mindverse.sglang_pd.sglang_health:
    url: "http://{{ ansible_host }}:30100/health_generate"
    timeout: 1800
    refused_max_interval: 5

- name: Wait until the router is ready (one healthy prefill and one healthy decode)
  mindverse.sglang_pd.sglang_health:
    url: http://10.0.0.10:8000/readiness
    api_key: "{{ sglang_router_api_key }}"
    timeout: 300
  register: router_ready

- name: Check every worker of the fleet at once
  mindverse.sglang_pd.sglang_health:
    urls:
      - http://10.0.0.11:30100/health_generate
      - http://10.0.0.12:30200/health_generate
    timeout: 60

- name: Accept a 503 as "up" while only checking that the port answers
  mindverse.sglang_pd.sglang_health:
    url: http://10.0.0.12:30200/health
    status_code: [200, 503]
    timeout: 60
"""

RETURN = r"""
results:
  description:
    - With O(urls), one entry per URL in the order given, with the keys RV(url), RV(status), RV(attempts),
      RV(elapsed), RV(latency) and (on failure) RV(error).
  returned: when O(urls) is given
  type: list
  elements: dict
  sample: [{url: http://10.0.0.11:30100/health_generate, status: 200, attempts: 1, elapsed: 0.05, latency: 0.05}]
url:
  description: The URL that was polled.
  returned: when O(url) is given
  type: str
  sample: http://10.0.0.11:30100/health_generate
status:
  description: HTTP status of the successful attempt; on failure the status of the last attempt (null if it got no answer).
  returned: when O(url) is given
  type: int
  sample: 200
attempts:
  description: Number of requests sent.
  returned: when O(url) is given
  type: int
  sample: 4
elapsed:
  description: Seconds from the start of the module (including O(initial_delay)) to the successful answer or the deadline.
  returned: when O(url) is given
  type: float
  sample: 7.0213
latency:
  description: Seconds taken by the successful request.
  returned: success, when O(url) is given
  type: float
  sample: 0.9876
error:
  description: Transport error of the last attempt (connection refused, timeout, ...), null if it got an HTTP answer.
  returned: failed, when O(url) is given
  type: str
  sample: "[Errno 111] Connection refused"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HTTP_ARGUMENT_SPEC, run_health_module


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **HTTP_ARGUMENT_SPEC,
            url=dict(type='str'),
            urls=dict(type='list', elements='str'),
            method=dict(type='str', default='GET', choices=['GET', 'POST']),
            body=dict(type='raw'),
            status_code=dict(type='list', elements='int', default=[200]),
            timeout=dict(type='float', default=600),
            request_timeout=dict(type='float', default=10),
            initial_delay=dict(type='float', default=0),
            interval=dict(type='float', default=1),
            max_interval=dict(type='float', default=0.5),
            refused_max_interval=dict(type='float', default=2),
            headers=dict(type='dict'),
        ),
        mutually_exclusive=[('url', 'urls')],
        required_one_of=[('url', 'urls')],
        supports_check_mode=True,
    )
    run_health_module(module)


if __name__ == '__main__':
    main()
