#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_chat_probe
short_description: Send one chat completion through an SGLang server or router and measure it
version_added: 0.1.0
description:
  - Sends one OpenAI-compatible chat completion to C(<url>/v1/chat/completions) and returns the
    answer, its token usage, the total latency and, when streaming, the time to the first token.
  - Without O(model) the first model listed by C(GET <url>/v1/models) is used.
  - "With O(stream=true) the request asks for C(stream_options.include_usage), so the last chunk
    before C(data: [DONE]) carries the usage; the server-sent events are parsed chunk by chunk."
  - "Fails on a status other than 200 (with up to 500 characters of the body), on the O(timeout),
    on a body or chunk that is not JSON, on a stream that ends without C(data: [DONE]), on a missing
    usage when O(require_usage=true), and when O(expected_content) is not in the answer."
  - The module never reports a change and runs in check mode as well.
author:
  - mindverse infrastructure team (@mindverse)
extends_documentation_fragment:
  - mindverse.sglang_pd.http_options
options:
  url:
    description:
      - Base URL of the router or server, for example V(http://10.0.0.10:8000). A URL ending in
        V(/v1) or V(/v1/chat/completions) is accepted too.
    type: str
    required: true
  model:
    description:
      - Model name sent in the request. When omitted, the first C(id) of C(GET /v1/models) is used.
    type: str
  messages:
    description:
      - Chat messages, each a dictionary with C(role) and C(content).
      - Defaults to one short user message.
    type: list
    elements: dict
  max_tokens:
    description:
      - Maximum number of tokens to generate.
    type: int
    default: 16
  stream:
    description:
      - Request a streamed answer (server-sent events) with C(stream_options.include_usage=true).
    type: bool
    default: false
  require_usage:
    description:
      - Fail when the answer carries no C(usage) object (when streaming, when no chunk carries one).
    type: bool
    default: true
  timeout:
    description:
      - Total deadline in seconds for the model lookup, the request and reading the whole answer.
    type: float
    default: 60
  expected_content:
    description:
      - Fail unless the generated text contains this substring.
    type: str
attributes:
  check_mode:
    description: Runs normally in check mode; a completion changes nothing on the server.
    support: full
  diff_mode:
    description: Never reports a change, so there is no diff.
    support: none
seealso:
  - module: mindverse.sglang_pd.sglang_health
  - module: mindverse.sglang_pd.sglang_router_workers
"""

EXAMPLES = r"""
- name: One completion through the router
  mindverse.sglang_pd.sglang_chat_probe:
    url: http://10.0.0.10:8000
  register: probe

- name: Streamed completion, usage required, with the time to first token
  mindverse.sglang_pd.sglang_chat_probe:
    url: http://10.0.0.10:8000
    model: glm-5.2-fp8
    api_key: "{{ sglang_router_api_key }}"
    stream: true
    max_tokens: 32
    messages:
      - role: user
        content: "What is the capital of France? Answer in one word."
    expected_content: Paris
    timeout: 120
  register: stream_probe

- name: Show the measurements
  ansible.builtin.debug:
    msg: "TTFT {{ stream_probe.ttft }} s, total {{ stream_probe.latency }} s, {{ stream_probe.usage.completion_tokens }} tokens"
"""

RETURN = r"""
url:
  description: The chat completions URL that was called (the models URL if the model lookup failed).
  returned: always
  type: str
  sample: http://10.0.0.10:8000/v1/chat/completions
status:
  description: HTTP status of the chat completion request.
  returned: when the server answered
  type: int
  sample: 200
model:
  description: The model named in the answer (or the one requested).
  returned: always
  type: str
  sample: glm-5.2-fp8
latency:
  description: "Seconds from the start of the request to the end of the answer (for a stream, to C(data: [DONE]))."
  returned: when the request was sent
  type: float
  sample: 0.4613
ttft:
  description:
    - Seconds to the first chunk carrying content (or reasoning content) when streaming; equal to RV(latency) otherwise.
    - If no chunk carried content, the time to the first chunk.
  returned: success
  type: float
  sample: 0.1187
usage:
  description: The C(usage) object of the answer (for a stream, of its usage chunk); empty if there was none.
  returned: success
  type: dict
  sample: {"prompt_tokens": 12, "completion_tokens": 16, "total_tokens": 28}
content:
  description: The generated text (the streamed deltas joined).
  returned: success
  type: str
  sample: Hello! How can I help you today?
finish_reason:
  description: The C(finish_reason) of the first choice (the last one seen when streaming).
  returned: success
  type: str
  sample: length
chunks:
  description: Number of JSON chunks received when streaming (the C([DONE]) marker not counted); V(0) without streaming.
  returned: success
  type: int
  sample: 18
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._chat import run_chat_probe_module
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._http import HTTP_ARGUMENT_SPEC


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **HTTP_ARGUMENT_SPEC,
            url=dict(type='str', required=True),
            model=dict(type='str'),
            messages=dict(type='list', elements='dict'),
            max_tokens=dict(type='int', default=16, no_log=False),
            stream=dict(type='bool', default=False),
            require_usage=dict(type='bool', default=True),
            timeout=dict(type='float', default=60),
            expected_content=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    run_chat_probe_module(module)


if __name__ == '__main__':
    main()
