# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Where a PCI function sits: its address, NUMA node and the bridges above it, from sysfs.

Private helper of the fact modules (amdgpu_facts, rdma_facts) and of the GPU-NIC affinity.
"""

from __future__ import annotations

import os
import re

_PCI_ADDRESS_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def pci_placement(device_link):
    """PCI address, NUMA node and upstream path of the PCI function behind a sysfs ``device`` link.

    The path is the chain of PCI addresses from the root port down to the function, read from
    the link's target (``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:0c:00.0``): two
    functions that share an element below the host bridge sit under the same root port or
    PCIe switch. ``numa_node`` is None where the kernel writes -1 (no affinity known).
    """
    target = os.path.realpath(device_link)
    chain = [part.lower() for part in target.split(os.sep) if _PCI_ADDRESS_RE.match(part)]
    try:
        with open(os.path.join(device_link, "numa_node"), "r", encoding="utf-8") as handle:
            numa_node = int(handle.read().strip())
    except (IOError, OSError, ValueError):
        numa_node = None
    return {
        "pci_address": chain[-1] if chain else None,
        "numa_node": numa_node if numa_node is not None and numa_node >= 0 else None,
        "pci_path": chain,
    }
