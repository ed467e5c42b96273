#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight
short_description: Check a PD inventory on the controller before anything changes
version_added: 0.1.0
description:
  - Runs every inventory check of the collection in one pass on the controller, contacting no host
    (C(playbooks/preflight.yml) runs it once per C(ansible-playbook) run, before any play changes a node).
  - Each host's variables are read once. What the C(sglang_worker) and C(sglang_router) roles get on a host
    is their C(defaults/main.yml) templated by Ansible's own templar with the host's variables, so a
    default is what the role would see. Values are checked against the roles' argument specs and the
    inventory-wide variables with Ansible's C(ArgumentSpecValidator); besides, a string is refused
    where a boolean, a list or a dict is expected (Ansible would convert it, a role's condition or loop
    would misread it), except for run switches typed as C(-e key=value).
  - Then every launch command is built as the roles build it, and the plan is checked (names, addresses,
    ports, GPUs, InfiniBand devices, SGLang flags and the rules SGLang asserts at start, prefill/decode
    pairing, router, firewall). Checks run in the order of RV(checks) and stop at the first that finds a
    problem.
  - The task never fails itself; the caller asserts that RV(failed_check) is empty and shows
    RV(problems) of that check. Each problem names the host, the variable, its value (secrets redacted)
    and what to write instead.
  - The result holds the plan (RV(model)) with its API keys, so run the task with C(no_log).
author:
  - mindverse infrastructure team (@mindverse)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Reads and checks only.
  diff_mode:
    support: none
  platform:
    platforms: all
    details: Runs on the controller; needs no connection.
notes:
  - The checks read the PD groups C(sglang_router), C(sglang_prefill) and C(sglang_decode) of the inventory.
  - The variables each role takes are listed in C(docs/variables.md), generated from the roles' argument specs.
"""

EXAMPLES = r"""
- name: Run every inventory check on the controller
  mindverse.sglang_pd.preflight:
  register: preflight
  no_log: true

- name: Assert the inventory passes every check
  ansible.builtin.assert:
    that: preflight.failed_check is none
    fail_msg: "{{ preflight.problems[preflight.failed_check] | default([]) }}"
    quiet: true
"""

RETURN = r"""
checks:
  description: Every check, in the order they run.
  returned: always
  type: list
  elements: str
  sample: [evaluation, groups, variables, worker_specs, image, model_weights, build, names]
failed_check:
  description: The first check that found a problem, or null when all passed.
  returned: always
  type: str
  sample: variables
problems:
  description: For each check that ran, its problems (empty when it passed), one line each naming the hosts.
  returned: always
  type: dict
  sample:
    variables:
      - 'p0, d0: sglang_worker_trust_remote_code = "false": a string, not a boolean; write sglang_worker_trust_remote_code: false'
model:
  description:
    - The plan every check read (hosts, workers with their launch commands, routers), or null when a check of
      the inventory alone failed. Holds API keys.
  returned: always
  type: dict
msg:
  description: Which check failed, or that all passed.
  returned: always
  type: str
  sample: all 19 checks passed
"""
