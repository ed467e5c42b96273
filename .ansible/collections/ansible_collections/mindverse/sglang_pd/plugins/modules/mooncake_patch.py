#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mooncake_patch
short_description: Apply the HIP-transport and dmabuf fixes to a Mooncake transfer engine source tree
version_added: 0.1.0
description:
  - Edits a Mooncake source tree so that cross-node KV transfers of SGLang PD disaggregation on ROCm use RDMA
    instead of the node-local HIP IPC transport, and so that the dmabuf (GPUDirect RDMA) code path is compiled
    into the RDMA transport.
  - C(hip_transport_guard) changes the one C(#ifdef USE_HIP) whose block calls C(installTransport) for the
    C("hip") transport in C(mooncake-transfer-engine/src/transfer_engine_impl.cpp) to C(#ifdef USE_HIP_DISABLED).
    Every other C(USE_HIP) guard, in that file or any other, stays as it is.
  - C(hip_priority) makes the HIP entry of the protocol priority lambda in
    C(mooncake-transfer-engine/src/multi_transport.cpp) return 0 (RDMA is 2). It recognises the older form,
    which returns the literal 4, and the newer form, which returns 0 when the C(MC_DISABLE_HIP) environment
    variable is set and 4 otherwise. The result says which one it found.
  - C(rdma_dmabuf) appends a C(target_compile_definitions) line that gives the C(rdma_transport) target the
    C(PRIVATE USE_HIP_DMABUF) definition to C(mooncake-transfer-engine/src/transport/rdma_transport/CMakeLists.txt),
    unless that target already gets the definition there (or, in newer Mooncake, in C(src/CMakeLists.txt)).
  - Every edit is worked out before any file is written. When one target is not found (a Mooncake version with
    an unknown layout) the module fails without writing anything and names the file and the line it looked for.
  - Files are replaced atomically and keep their mode. A second run reports every fix as C(already_present)
    and changes nothing.
author:
  - mindverse infrastructure team (@mindverse)
options:
  src:
    description:
      - Root of the Mooncake source tree, the directory that holds C(mooncake-transfer-engine/).
    type: path
    required: true
  fixes:
    description:
      - Fixes to apply, in any order.
    type: list
    elements: str
    choices: [hip_transport_guard, hip_priority, rdma_dmabuf]
    default: [hip_transport_guard, hip_priority, rdma_dmabuf]
attributes:
  check_mode:
    description: Works out the same result and diff without writing any file.
    support: full
  diff_mode:
    description: Returns the before and after text of every file it changes (or would change).
    support: full
notes:
  - Only the source changes; rebuild the engine (role C(mindverse.sglang_pd.mooncake_patch) with
    C(mooncake_patch_build) set to true) for the fixes to take effect.
  - Newer Mooncake can get the same run-time behaviour without a rebuild through the environment variables
    C(MC_DISABLE_HIP) and C(MOONCAKE_DISABLE_HIP_DMABUF); see docs/mooncake.md in the collection.
seealso:
  - module: mindverse.sglang_pd.prebuilt_artifact
"""

EXAMPLES = r"""
- name: Patch the Mooncake tree of the build host
  mindverse.sglang_pd.mooncake_patch:
    src: /sgl-workspace/Mooncake
  register: mooncake_patch_result

- name: Only move HIP below RDMA, keep the HIP transport installed
  mindverse.sglang_pd.mooncake_patch:
    src: /srv/build/Mooncake
    fixes:
      - hip_priority
"""

RETURN = r"""
src:
  description: The Mooncake tree that was examined.
  returned: always
  type: str
  sample: /sgl-workspace/Mooncake
fixes:
  description: One entry per requested fix, in the order hip_transport_guard, hip_priority, rdma_dmabuf.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Name of the fix.
      type: str
      sample: hip_priority
    file:
      description: File the fix edits, relative to O(src).
      type: str
      sample: mooncake-transfer-engine/src/multi_transport.cpp
    status:
      description:
        - V(applied) (the file was, or in check mode would be, changed), V(already_present) (the fix is already
          in the file) or V(not_applicable) (the tree does not need it, for example newer Mooncake that defines
          USE_HIP_DMABUF on rdma_transport in src/CMakeLists.txt).
      type: str
      sample: applied
    detail:
      description: What was found and changed, with line numbers; for hip_priority the style that was found
        (C(older literal) or C(conditional on MC_DISABLE_HIP)).
      type: str
      sample: 'HIP priority set to 0, below RDMA (2); line 612 (older literal): "return 4;" -> "return 0;"'
  sample:
    - name: hip_transport_guard
      file: mooncake-transfer-engine/src/transfer_engine_impl.cpp
      status: applied
      detail: 'line 402: "#ifdef USE_HIP" -> "#ifdef USE_HIP_DISABLED" around installTransport("hip", ...); other USE_HIP guards unchanged'
patch:
  description: Unified diff of every change (empty when nothing changes); in check mode, what would change.
  returned: always
  type: str
  sample: |
    --- a/mooncake-transfer-engine/src/multi_transport.cpp
    +++ b/mooncake-transfer-engine/src/multi_transport.cpp
    @@ -610,7 +610,7 @@
    -            if (p == "hip") return 4;
    +            if (p == "hip") return 0;
file:
  description: On failure, the file whose target was not found (relative to O(src)).
  returned: failure
  type: str
  sample: mooncake-transfer-engine/src/multi_transport.cpp
fix:
  description: On failure, the fix whose target was not found.
  returned: failure
  type: str
  sample: hip_priority
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._mooncake_patch import (
    FIX_NAMES,
    run_mooncake_patch_module,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            src=dict(type='path', required=True),
            fixes=dict(type='list', elements='str', choices=list(FIX_NAMES), default=list(FIX_NAMES)),
        ),
        supports_check_mode=True,
    )
    run_mooncake_patch_module(module)


if __name__ == '__main__':
    main()
