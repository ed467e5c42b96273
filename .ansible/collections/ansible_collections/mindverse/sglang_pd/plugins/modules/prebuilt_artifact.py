#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: prebuilt_artifact
short_description: Verify a pinned prebuilt binary, from a local path or downloaded from a URL
version_added: 0.1.0
description:
  - Checks that a prebuilt binary, such as the Mooncake transfer engine C(patches/mooncake/engine_v3.so) of the
    production fork, is exactly the pinned build, by its md5 and optionally its sha256.
  - With O(path) the file is only read. With O(url) the file is downloaded to O(dest) through a temporary file
    and moved into place only when its checksums match; when O(dest) already matches, nothing is downloaded.
  - A Git LFS pointer file (a small text file that starts with C(version https://git-lfs.github.com/spec/v1)
    and names an C(oid sha256:) and a C(size)) in place of the binary is recognised and refused with a message
    saying to run C(git lfs pull).
author:
  - mindverse infrastructure team (@mindverse)
options:
  path:
    description:
      - Local file on the target to verify. Mutually exclusive with O(url).
    type: path
  url:
    description:
      - HTTP, HTTPS or FTP URL to download the file from. Needs O(dest). Mutually exclusive with O(path).
    type: str
  dest:
    description:
      - Where to store the download. When it is an existing directory, the file name is taken from the URL.
      - The directory must exist.
    type: path
  md5:
    description:
      - Expected md5 of the file, 32 hex digits.
    type: str
    required: true
  sha256:
    description:
      - Expected sha256 of the file, 64 hex digits. Checked in addition to O(md5) when given.
    type: str
  timeout:
    description:
      - Timeout in seconds of the HTTP connection and of each read.
    type: int
    default: 60
  validate_certs:
    description:
      - Verify TLS certificates of HTTPS URLs.
    type: bool
    default: true
  headers:
    description:
      - Extra HTTP headers of the download, for example an C(Authorization) header of a private artifact store.
    type: dict
attributes:
  check_mode:
    description: With O(path) it verifies as usual. With O(url) it reports whether a download would happen,
      without downloading.
    support: full
  diff_mode:
    description: No diff is returned.
    support: none
notes:
  - A pointer file means the clone was made without Git LFS objects; C(git lfs pull) (or
    C(git lfs pull --include=patches/mooncake/engine_v3.so)) replaces it with the binary.
seealso:
  - module: mindverse.sglang_pd.mooncake_patch
  - module: ansible.builtin.get_url
"""

EXAMPLES = r"""
- name: Verify the prebuilt Mooncake engine of the production fork
  mindverse.sglang_pd.prebuilt_artifact:
    path: "{{ playbook_dir }}/../patches/mooncake/engine_v3.so"
    md5: 0e1b8fdd2d39e007b58c3e1711ec398b
  register: mooncake_engine

- name: Fetch the prebuilt engine from an artifact store and verify it
  mindverse.sglang_pd.prebuilt_artifact:
    url: https://artifacts.example.invalid/mooncake/engine_v3.so
    dest: /var/tmp/engine_v3.so
    md5: 0e1b8fdd2d39e007b58c3e1711ec398b
    headers:
      Authorization: "Bearer {{ artifact_token }}"
"""

RETURN = r"""
path:
  description: The verified file (O(path), or the download's destination).
  returned: success
  type: str
  sample: /var/tmp/engine_v3.so
md5:
  description: md5 of the file (in check mode before a download, the expected md5).
  returned: success
  type: str
  sample: 0e1b8fdd2d39e007b58c3e1711ec398b
sha256:
  description: sha256 of the file (in check mode before a download, the expected sha256 or null).
  returned: success
  type: str
  sample: 5f0c3f8a3c5c8e0b8b1a27f1d3c4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f50
size:
  description: Size of the file in bytes (null in check mode before a download).
  returned: success
  type: int
  sample: 70254592
downloaded:
  description: Whether the file was downloaded in this run.
  returned: success
  type: bool
  sample: true
url:
  description: The URL the file comes from.
  returned: when O(url) is given
  type: str
  sample: https://artifacts.example.invalid/mooncake/engine_v3.so
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._prebuilt_artifact import run_prebuilt_artifact_module


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path'),
            url=dict(type='str'),
            dest=dict(type='path'),
            md5=dict(type='str', required=True),
            sha256=dict(type='str'),
            timeout=dict(type='int', default=60),
            validate_certs=dict(type='bool', default=True),
            headers=dict(type='dict', no_log=True),
        ),
        mutually_exclusive=[('path', 'url')],
        required_one_of=[('path', 'url')],
        required_by={'url': 'dest'},
        supports_check_mode=True,
    )
    run_prebuilt_artifact_module(module)


if __name__ == '__main__':
    main()
