#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: free_space
short_description: Measure the free space of a folder's file system and warn below a threshold
version_added: 0.1.0
description:
  - Measures the bytes an unprivileged writer may still use on the file system that holds O(path) (as
    C(df --output=avail)); a O(path) that does not exist yet is measured at its nearest existing parent, where it
    will be created.
  - Warns (Ansible's C([WARNING]) in the recap output) when they are below O(warn_below_bytes). It never fails on
    the space itself; a caller that writes decides whether what it writes fits.
  - The same measure and the same decision as M(mindverse.sglang_pd.image_pull) at Docker's data-root.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Only reads.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  path:
    description: The folder (for example the model directory).
    type: path
    required: true
  warn_below_bytes:
    description: Warn when the free bytes are below this; V(0) never warns.
    type: int
    default: 0
  place:
    description: What O(path) is, for the warning (for example C(the model directory)).
    type: str
    default: the folder
  warn_setting:
    description: The name the warning gives O(warn_below_bytes) (the caller's variable).
    type: str
    default: warn_below_bytes
  consequence:
    description: What fails next when nothing is done, for the warning.
    type: str
    default: the next write there may not fit
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Measure the model directory's free space
  mindverse.sglang_pd.free_space:
    path: /models/glm
    warn_below_bytes: "{{ 50 * 1024 ** 3 }}"
    place: the model directory
    warn_setting: sglang_model_free_warn_bytes
"""

RETURN = r"""
path:
  description: O(path).
  returned: always
  type: str
measured:
  description: The folder measured (O(path), or its nearest existing parent).
  returned: always
  type: str
free_bytes:
  description: Bytes free for an unprivileged writer on the file system of RV(measured).
  returned: always
  type: int
  sample: 512000000000
warn_below_bytes:
  description: O(warn_below_bytes).
  returned: always
  type: int
low:
  description: Whether RV(free_bytes) is below O(warn_below_bytes) (then the module warned).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._free_space import (
    free_bytes_at,
    is_low,
    low_space_warning,
    nearest_existing,
)


def main():
    module = AnsibleModule(
        argument_spec={
            'path': {'type': 'path', 'required': True},
            'warn_below_bytes': {'type': 'int', 'default': 0},
            'place': {'type': 'str', 'default': 'the folder'},
            'warn_setting': {'type': 'str', 'default': 'warn_below_bytes'},
            'consequence': {'type': 'str', 'default': 'the next write there may not fit'},
        },
        supports_check_mode=True,
    )
    params = module.params
    measured = nearest_existing(params['path'])
    try:
        free = free_bytes_at(measured)
    except OSError as exc:
        module.fail_json(msg='Cannot measure the free space of %s at %s: %s [SGLPD-DSK-001]' % (params['path'], measured, exc))
    warning = low_space_warning(params['place'], params['path'], free, params['warn_below_bytes'], params['warn_setting'],
                                params['consequence'])
    if warning:
        module.warn(warning)
    module.exit_json(changed=False, path=params['path'], measured=measured, free_bytes=free,
                     warn_below_bytes=params['warn_below_bytes'], low=is_low(free, params['warn_below_bytes']))


if __name__ == '__main__':
    main()
