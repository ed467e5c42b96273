#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: worker_host_info
short_description: Read what a worker node offers its containers, in one call
version_added: 0.1.0
description:
  - Reads, in one module call (one round trip to the node), what the worker containers of a node need from it,
    namely the GPUs as M(mindverse.sglang_pd.amdgpu_facts) reports them, the RDMA devices as
    M(mindverse.sglang_pd.rdma_facts) reports them, which of the device files O(devices) exist, and the group
    IDs of the groups O(groups) on the node.
  - The GPUs and RDMA devices give the node's GPU-NIC pairing (docs/fabric.md); the device files and group IDs
    give the containers' C(--device) and C(--group-add) options.
  - Group names are resolved on the node (through its name service, as C(getent group) does), because device
    files belong to the node's group IDs and the image may not know the names.
  - The module only reads; it never reports a change. Unlike the two C(_facts) modules it sets no host facts.
author:
  - mindverse infrastructure team (@mindverse)
options:
  root:
    description:
      - Directory under which C(sys/) is read. Tests point it at a tree they wrote.
      - The paths of O(devices) are not under it; they are the node's own.
    type: path
    default: /
  devices:
    description:
      - Device files to look for, for example V(/dev/kfd) and V(/dev/infiniband).
    type: list
    elements: str
    default: []
  groups:
    description:
      - Group names to resolve to the node's group IDs, for example V(video) and V(render).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - mindverse.sglang_pd.read_only
  - ansible.builtin.action_common_attributes
attributes:
  platform:
    platforms: posix
seealso:
  - module: mindverse.sglang_pd.amdgpu_facts
  - module: mindverse.sglang_pd.rdma_facts
"""

EXAMPLES = r"""
- name: Read what the node offers the workers
  mindverse.sglang_pd.worker_host_info:
    devices: [/dev/kfd, /dev/dri, /dev/infiniband]
    groups: [video, render]
  register: node

- name: Show the node's GPUs, RDMA devices, device files and group IDs
  ansible.builtin.debug:
    msg: >-
      {{ node.amdgpu.gpu_count }} GPUs, {{ node.rdma.device_count }} RDMA devices,
      devices {{ node.devices }}, groups {{ node.group_ids }}
"""

RETURN = r"""
amdgpu:
  description: The AMD GPUs, exactly as the C(amdgpu) fact of M(mindverse.sglang_pd.amdgpu_facts).
  returned: always
  type: dict
  sample: {"gpu_count": 8, "gpus": [], "pci_gpu_count": 8, "pci_gpus": [], "missing_pci_addresses": [],
           "driver_loaded": true, "driver_version": "6.12.12", "kfd_present": true}
rdma:
  description: The RDMA devices and ports, exactly as the C(rdma) fact of M(mindverse.sglang_pd.rdma_facts).
  returned: always
  type: dict
  sample: {"device_count": 8, "port_count": 8, "devices": []}
devices:
  description: The device files of O(devices) that exist on the node, in the order given.
  returned: always
  type: list
  elements: str
  sample: [/dev/kfd, /dev/dri]
group_ids:
  description: The group ID of each group of O(groups) the node knows, as a string; unknown groups are left out.
  returned: always
  type: dict
  sample: {"video": "44", "render": "105"}
"""

import grp
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _amdgpu, _rdma


def group_ids(names):
    """The node's group ID of each name it knows, as getent group reports it (a string)."""
    found = {}
    for name in names:
        try:
            found[name] = str(grp.getgrnam(name).gr_gid)
        except KeyError:
            continue
    return found


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type='path', default='/'),
            devices=dict(type='list', elements='str', default=[]),
            groups=dict(type='list', elements='str', default=[]),
        ),
        supports_check_mode=True,
    )
    params = module.params
    module.exit_json(
        changed=False,
        amdgpu=_amdgpu.collect(params['root']),
        rdma=_rdma.collect(params['root']),
        devices=[path for path in params['devices'] if os.path.lexists(path)],
        group_ids=group_ids(params['groups']),
    )


if __name__ == '__main__':
    main()
