#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: amdgpu_facts
short_description: Report the AMD GPUs that the amdgpu driver sees, from sysfs
version_added: 0.1.0
description:
  - Reads the KFD topology (C(/sys/class/kfd/kfd/topology/nodes)), the DRM cards
    (C(/sys/class/drm/card*)), the PCI bus (C(/sys/bus/pci/devices)) and the amdgpu kernel module
    (C(/sys/module/amdgpu)) and returns them as the C(amdgpu) fact.
  - A KFD node with a non-zero C(simd_count) is a GPU. Its PCI address comes from the node's
    C(domain) and C(location_id), its gfx target from C(gfx_target_version) (V(90402) is V(gfx942)),
    its VRAM from the frame-buffer memory banks.
  - AMD GPU functions on the PCI bus that have no KFD node are reported as missing, so a failed
    expectation names each GPU that the driver does not show.
  - With O(expected_count) or O(expected_gfx) the module fails when the hardware differs; without
    them it only reports.
  - The module only reads; it never reports a change.
author:
  - mindverse infrastructure team (@mindverse)
options:
  root:
    description:
      - Directory under which C(sys/) is read. Tests point it at a tree they wrote.
    type: path
    default: /
  expected_count:
    description:
      - Number of GPUs the driver must show. When set, the module fails unless exactly this many
        GPUs are visible, and names every GPU that is on the PCI bus but not visible to the driver.
    type: int
  expected_gfx:
    description:
      - gfx target every visible GPU must report, for example V(gfx942) for MI300X.
    type: str
extends_documentation_fragment:
  - mindverse.sglang_pd.read_only
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - The driver version is read from C(/sys/module/amdgpu/version), which the amdgpu-dkms module
    provides; the in-tree kernel driver has no such file, so O(root) with an in-tree driver
    returns a null C(driver_version).
seealso:
  - module: mindverse.sglang_pd.rdma_facts
"""

EXAMPLES = r"""
- name: Read the GPUs the driver sees
  mindverse.sglang_pd.amdgpu_facts:

- name: Show the number of GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts['amdgpu']['gpu_count'] }} GPUs, driver {{ ansible_facts['amdgpu']['driver_version'] }}"

- name: Fail unless all 8 MI300X GPUs are visible to the driver
  mindverse.sglang_pd.amdgpu_facts:
    expected_count: 8
    expected_gfx: gfx942
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    amdgpu:
      description: The AMD GPUs, as the driver and the PCI bus report them.
      returned: always
      type: dict
      contains:
        gpu_count:
          description: Number of GPUs in the KFD topology (visible to the driver).
          type: int
          sample: 8
        gpus:
          description:
            - One entry per visible GPU, in KFD node order.
            - Keys are C(pci_address), C(numa_node) (null where the kernel knows none),
              C(pci_path) (the PCI addresses from the root port down to the GPU, read through
              C(/sys/bus/pci/devices)), C(vendor_id), C(device_id) (hex strings), C(model)
              (V(MI300X) for 0x74a1, 0x74b5, 0x74bd), C(gfx_target), C(gfx_target_version),
              C(simd_count), C(vram_bytes), C(render_node), C(card), C(kfd_node), C(unique_id).
          type: list
          elements: dict
          sample:
            - pci_address: "0000:11:00.0"
              numa_node: 0
              pci_path: ["0000:00:01.0", "0000:a0:00.0", "0000:11:00.0"]
              vendor_id: "0x1002"
              device_id: "0x74b5"
              model: MI300X
              gfx_target: gfx942
              gfx_target_version: 90402
              simd_count: 1216
              vram_bytes: 205822885888
              render_node: /dev/dri/renderD128
              card: card0
              kfd_node: 1
              unique_id: 1461283746512395274
        pci_gpu_count:
          description: Number of AMD GPU functions on the PCI bus, visible to the driver or not.
          type: int
          sample: 8
        pci_gpus:
          description: AMD GPU functions on the PCI bus (C(pci_address), C(device_id), C(model)).
          type: list
          elements: dict
          sample:
            - pci_address: "0000:11:00.0"
              device_id: "0x74b5"
              model: MI300X
        missing_pci_addresses:
          description: PCI addresses of AMD GPUs that have no KFD node.
          type: list
          elements: str
          sample: ["0000:2f:00.0"]
        driver_loaded:
          description: Whether the amdgpu kernel module is loaded.
          type: bool
          sample: true
        driver_version:
          description: Version the loaded amdgpu module reports (amdgpu-dkms); null for the in-tree driver.
          type: str
          sample: 6.12.12
        kfd_present:
          description: Whether the KFD (compute) interface exists.
          type: bool
          sample: true
problems:
  description: What differs from O(expected_count) and O(expected_gfx), one sentence each; empty when nothing does.
  returned: always
  type: list
  elements: str
  sample: ["GPU at 0000:2f:00.0 present on PCI but not visible to the driver"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _amdgpu


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            expected_count=dict(type="int"),
            expected_gfx=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    _amdgpu.run_module(module)


if __name__ == "__main__":
    main()
