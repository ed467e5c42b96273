#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_pd_pair_probe
short_description: Send one request to chosen SGLang prefill and decode pairs, the way the PD router does
version_added: 0.1.0
description:
  - Sends one chat completion to C(<prefill_url>/v1/chat/completions) and C(<decode_url>/v1/chat/completions)
    at once, with the same body carrying the same C(bootstrap_host), C(bootstrap_port) and C(bootstrap_room),
    exactly as sglang-router 0.3.2 does in PD mode; the completion is taken from decode.
  - Proves that this decode reaches this prefill's bootstrap server and gets the KV cache of the room, which
    C(/health_generate) of either server does not show.
  - "Fails, naming the pair as C(prefill <url> (bootstrap <host>:<port>) -> decode <url>) and the room, when
    decode answers an error (its error text is quoted), when either server gives no answer within O(timeout),
    when prefill fails, when the completion is empty, and when the latency passes O(max_latency_ms)."
  - Without O(model) the first model listed by decode's C(GET /v1/models) is used.
  - With O(pairs) every pair is probed in this one call, O(parallel) pairs at a time, instead of one module call
    (one round trip to the node) per pair. Each pair is checked as above; the call fails naming every pair that
    failed, after all of them were probed.
  - The module never reports a change and runs in check mode as well.
author:
  - mindverse infrastructure team (@mindverse)
extends_documentation_fragment:
  - mindverse.sglang_pd.http_options
options:
  prefill_url:
    description:
      - Base URL of the prefill server, for example V(http://10.0.0.11:30100).
      - Required without O(pairs), together with O(decode_url) and O(bootstrap_port).
    type: str
  decode_url:
    description:
      - Base URL of the decode server, for example V(http://10.0.0.21:30200).
    type: str
  bootstrap_port:
    description:
      - The prefill's bootstrap port, as registered with the router (its C(--disaggregation-bootstrap-port)).
    type: int
  pairs:
    description:
      - The pairs to probe in this call, instead of O(prefill_url), O(decode_url) and O(bootstrap_port).
      - Each pair takes the other options (O(model), O(timeout), O(max_latency_ms) and the rest) from the call.
      - The results come back in RV(results), in the order of this list.
    type: list
    elements: dict
    suboptions:
      prefill_url:
        description:
          - Base URL of the prefill server.
        type: str
        required: true
      decode_url:
        description:
          - Base URL of the decode server.
        type: str
        required: true
      bootstrap_port:
        description:
          - The prefill's bootstrap port, as registered with the router.
        type: int
        required: true
      bootstrap_host:
        description:
          - Host sent as C(bootstrap_host). Defaults to the host of its O(pairs[].prefill_url).
        type: str
      room:
        description:
          - The C(bootstrap_room) sent to both servers. A random one when omitted.
        type: int
      api_key:
        description:
          - API key sent to both servers of this pair. Defaults to O(api_key).
        type: str
  parallel:
    description:
      - With O(pairs), how many pairs are probed at the same time.
    type: int
    default: 4
  bootstrap_host:
    description:
      - Host sent as C(bootstrap_host). Defaults to the host of O(prefill_url), as the router sends it.
      - Only without O(pairs); each pair sets its own.
    type: str
  room:
    description:
      - The C(bootstrap_room) sent to both servers, between 0 and 2**63 - 1. A random one when omitted (as the router draws it).
      - Only without O(pairs); each pair sets its own.
    type: int
  model:
    description:
      - Model name sent in the request. When omitted, the first C(id) of decode's C(GET /v1/models) is used.
    type: str
  messages:
    description:
      - Chat messages, each a dictionary with C(role) and C(content). Defaults to one short user message.
    type: list
    elements: dict
  max_tokens:
    description:
      - Maximum number of tokens to generate. V(8) when omitted, V(256) with O(long).
    type: int
  long:
    description:
      - Send the long request instead of the short one, to prove the KV transfer of a long prompt
        before traffic; without O(messages), a prompt of 8192 words (the same text every time; at least
        8192 tokens, as many KV pages with SGLang's default C(--page-size) of 1) and O(max_tokens) 256.
      - A failure names the pair and says it was the long probe.
    type: bool
    default: false
  timeout:
    description:
      - Seconds each server has to answer (the two requests run at the same time).
    type: float
    default: 60
  max_latency_ms:
    description:
      - Fail when both answers together take longer than this many milliseconds. No limit when omitted.
    type: float
  api_key:
    description:
      - "API key sent to both servers as C(Authorization: Bearer <api_key>) (the workers' C(--api-key))."
    type: str
attributes:
  check_mode:
    description: Runs normally in check mode; a completion changes nothing on the servers.
    support: full
  diff_mode:
    description: Never reports a change, so there is no diff.
    support: none
seealso:
  - module: mindverse.sglang_pd.sglang_chat_probe
  - module: mindverse.sglang_pd.sglang_router_workers
"""

EXAMPLES = r"""
- name: Probe one prefill and decode pair
  mindverse.sglang_pd.sglang_pd_pair_probe:
    prefill_url: http://10.0.0.11:30100
    bootstrap_port: 8998
    decode_url: http://10.0.0.21:30200
    api_key: "{{ sglang_worker_api_key }}"
    max_latency_ms: 30000
  register: pair

- name: Show the pair's latency
  ansible.builtin.debug:
    msg: "{{ pair.pair }}: room {{ pair.room }} in {{ pair.latency_ms }} ms"

- name: Probe a new decode with every prefill in one call, two pairs at a time
  mindverse.sglang_pd.sglang_pd_pair_probe:
    pairs:
      - {prefill_url: "http://10.0.0.11:30100", bootstrap_port: 8998, decode_url: "http://10.0.0.23:30200"}
      - {prefill_url: "http://10.0.0.12:30100", bootstrap_port: 8998, decode_url: "http://10.0.0.23:30200"}
    parallel: 2
    api_key: "{{ sglang_worker_api_key }}"
  register: pairs

- name: Prove the long KV transfer of a new decode with every prefill (8192-word prompt, 256 tokens)
  mindverse.sglang_pd.sglang_pd_pair_probe:
    pairs:
      - {prefill_url: "http://10.0.0.11:30100", bootstrap_port: 8998, decode_url: "http://10.0.0.23:30200"}
    long: true
    api_key: "{{ sglang_worker_api_key }}"

- name: Show each pair's latency
  ansible.builtin.debug:
    msg: "{{ pairs.results | map(attribute='pair') | zip(pairs.results | map(attribute='latency_ms')) | list }}"
"""

RETURN = r"""
results:
  description:
    - With O(pairs), one result per pair, in the order of O(pairs).
    - Each holds the keys returned for one pair (RV(pair), RV(room), RV(latency_ms) and the others), C(failed)
      (true when the pair failed its probe) and, when it failed, C(msg) naming the pair.
  returned: with O(pairs)
  type: list
  elements: dict
  sample: [{"pair": "prefill http://10.0.0.11:30100 (bootstrap 10.0.0.11:8998) -> decode http://10.0.0.21:30200",
            "room": 5093348221794519000, "latency_ms": 412.7, "failed": false}]
long:
  description: Whether the probe was the long one (O(long)).
  returned: without O(pairs)
  type: bool
  sample: false
pair:
  description: The pair, as every message names it.
  returned: without O(pairs)
  type: str
  sample: prefill http://10.0.0.11:30100 (bootstrap 10.0.0.11:8998) -> decode http://10.0.0.21:30200
room:
  description: The C(bootstrap_room) sent to both servers.
  returned: without O(pairs)
  type: int
  sample: 5093348221794519000
prefill_url:
  description: Base URL of the prefill server.
  returned: without O(pairs)
  type: str
  sample: http://10.0.0.11:30100
decode_url:
  description: Base URL of the decode server.
  returned: without O(pairs)
  type: str
  sample: http://10.0.0.21:30200
bootstrap_host:
  description: The C(bootstrap_host) sent.
  returned: without O(pairs)
  type: str
  sample: 10.0.0.11
bootstrap_port:
  description: The C(bootstrap_port) sent.
  returned: without O(pairs)
  type: int
  sample: 8998
model:
  description: The model named in the request.
  returned: without O(pairs)
  type: str
  sample: glm-5.2-fp8
latency_ms:
  description: Milliseconds from sending both requests until both answered.
  returned: without O(pairs), when both requests were sent
  type: float
  sample: 412.7
decode_status:
  description: HTTP status of decode's answer.
  returned: without O(pairs), when decode answered
  type: int
  sample: 200
prefill_status:
  description: HTTP status of prefill's answer (null when it gave none).
  returned: without O(pairs), when both requests were sent
  type: int
  sample: 200
content:
  description: The completion text decode generated.
  returned: without O(pairs), when decode answered with a completion
  type: str
  sample: Hello there.
usage:
  description: The C(usage) object of decode's answer.
  returned: without O(pairs), when decode answered with a completion
  type: dict
  sample: {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
finish_reason:
  description: The C(finish_reason) of decode's first choice.
  returned: without O(pairs), when decode answered with a completion
  type: str
  sample: stop
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HTTP_ARGUMENT_SPEC
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._pair_probe import run_pair_probe_module


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **HTTP_ARGUMENT_SPEC,
            prefill_url=dict(type='str'),
            decode_url=dict(type='str'),
            bootstrap_port=dict(type='int'),
            pairs=dict(type='list', elements='dict', options=dict(
                prefill_url=dict(type='str', required=True),
                decode_url=dict(type='str', required=True),
                bootstrap_port=dict(type='int', required=True),
                bootstrap_host=dict(type='str'),
                room=dict(type='int'),
                api_key=dict(type='str', no_log=True),
            )),
            parallel=dict(type='int', default=4),
            bootstrap_host=dict(type='str'),
            room=dict(type='int'),
            model=dict(type='str'),
            messages=dict(type='list', elements='dict'),
            max_tokens=dict(type='int', no_log=False),
            long=dict(type='bool', default=False),
            timeout=dict(type='float', default=60),
            max_latency_ms=dict(type='float'),
        ),
        required_one_of=[('pairs', 'prefill_url')],
        required_together=[('prefill_url', 'decode_url', 'bootstrap_port')],
        mutually_exclusive=[('pairs', 'prefill_url'), ('pairs', 'bootstrap_host'), ('pairs', 'room')],
        supports_check_mode=True,
    )
    run_pair_probe_module(module)


if __name__ == '__main__':
    main()
