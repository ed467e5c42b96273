#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_facts
short_description: Report RDMA devices and ports from /sys/class/infiniband
version_added: 0.1.0
description:
  - Reads every device under C(/sys/class/infiniband) (node GUID, node type, HCA type, firmware)
    and each of its ports (state, physical state, rate, link layer, non-zero GIDs) and returns them
    as the C(rdma) fact.
  - "The port state C(4: ACTIVE) becomes V(ACTIVE); a rate that starts with C(400 Gb/sec) becomes V(400)."
  - With O(expected_devices) or O(expected_rate_gbps) the module fails naming each expected device
    that is missing and each port that is not ACTIVE or runs at another rate; without them it only
    reports.
  - The module only reads; it never reports a change.
author:
  - mindverse infrastructure team (@mindverse)
options:
  root:
    description:
      - Directory under which C(sys/class/infiniband) is read. Tests point it at a tree they wrote.
    type: path
    default: /
  expected_devices:
    description:
      - RDMA device names that must exist, every port of each ACTIVE, for example
        V(mlx5_ib0) to V(mlx5_ib7) on Azure ND MI300X v5.
      - Devices not in the list are reported but not checked.
    type: list
    elements: str
  expected_rate_gbps:
    description:
      - Rate in Gb/s every checked port must run at, for example V(400) for NDR.
      - Without O(expected_devices), every port of every device is checked.
    type: int
extends_documentation_fragment:
  - mindverse.sglang_pd.read_only
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  facts:
    support: full
  platform:
    platforms: posix
seealso:
  - module: mindverse.sglang_pd.amdgpu_facts
"""

EXAMPLES = r"""
- name: Read the RDMA devices and ports
  mindverse.sglang_pd.rdma_facts:

- name: Fail unless the eight InfiniBand ports of an ND MI300X v5 are ACTIVE at 400 Gb/s
  mindverse.sglang_pd.rdma_facts:
    expected_devices: "{{ range(8) | map('string') | map('regex_replace', '^', 'mlx5_ib') | list }}"
    expected_rate_gbps: 400
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    rdma:
      description: The RDMA devices and their ports.
      returned: always
      type: dict
      contains:
        device_count:
          description: Number of RDMA devices.
          type: int
          sample: 8
        port_count:
          description: Number of ports over all devices.
          type: int
          sample: 8
        devices:
          description:
            - One entry per device, sorted by name, with C(name), C(node_guid), C(node_type),
              C(hca_type), C(fw_ver), C(ports) and where it sits on PCI, read through its
              C(device) link; C(pci_address), C(numa_node) (null where the kernel knows none)
              and C(pci_path) (the PCI addresses from the root port down to the device; empty
              when the link is missing).
            - Each port has C(port), C(state) (V(ACTIVE), V(DOWN), ...), C(state_num), C(phys_state)
              (V(LinkUp), V(Disabled), ...), C(phys_state_num), C(rate) (the raw text), C(rate_gbps),
              C(link_layer) (V(InfiniBand) or V(Ethernet) for RoCE), C(gid0), C(gids) (the non-zero
              GIDs with their C(index), C(type) (V(IB/RoCE v1) or V(RoCE v2)), C(ndev) and C(ipv4)
              for an IPv4-mapped GID), C(netdev) and C(mtu) (the MTU of the port's network device
              on RoCE; null on InfiniBand, whose active MTU sysfs does not show).
          type: list
          elements: dict
          sample:
            - name: mlx5_ib0
              node_guid: "0c42:a103:0097:0000"
              node_type: CA
              hca_type: MT4129
              fw_ver: 28.39.1002
              pci_address: "0000:0d:00.0"
              numa_node: 0
              pci_path: ["0000:00:01.0", "0000:a0:00.0", "0000:0d:00.0"]
              ports:
                - port: 1
                  state: ACTIVE
                  state_num: 4
                  phys_state: LinkUp
                  phys_state_num: 5
                  rate: 400 Gb/sec (4X NDR)
                  rate_gbps: 400
                  link_layer: InfiniBand
                  gid0: "fe80:0000:0000:0000:0c42:a103:0097:0000"
                  gids:
                    - index: 0
                      gid: "fe80:0000:0000:0000:0c42:a103:0097:0000"
                      type: IB/RoCE v1
                      ndev: null
                      ipv4: null
                  netdev: null
                  mtu: null
problems:
  description: Each missing device and each port not ACTIVE or at the wrong rate; empty when none.
  returned: always
  type: list
  elements: str
  sample: ["mlx5_ib3 port 1: state DOWN (physical state Disabled), expected ACTIVE"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _rdma


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            expected_devices=dict(type="list", elements="str"),
            expected_rate_gbps=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    _rdma.run_module(module)


if __name__ == "__main__":
    main()
