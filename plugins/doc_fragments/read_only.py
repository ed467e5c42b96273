# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations


class ModuleDocFragment:
    """The check and diff mode attributes of the modules that only read (amdgpu_facts, rdma_facts, sglang_health, worker_host_info)."""

    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Runs normally in check mode; it only reads.
    support: full
  diff_mode:
    description: Never reports a change, so there is no diff.
    support: none
"""
