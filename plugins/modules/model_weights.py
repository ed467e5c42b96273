#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_weights
short_description: Check a model directory on the node, or record its manifest
version_added: 0.1.0
description:
  - Checks a model directory in the SGLang / Hugging Face layout on the managed node, without Docker.
  - "Always checked: C(config.json), a tokenizer (C(tokenizer.json) or C(tokenizer.model)), C(tokenizer_config.json),
    and the weights - C(model.safetensors.index.json) and every shard its C(weight_map) names, or a single
    C(model.safetensors). Each safetensors file must have the size its own header gives, which finds truncated
    shards without reading them."
  - With O(manifest) every file it lists must also be present with the listed size and sha256. Only files whose
    size matches are hashed, and hashes are cached per file (by size and modification time) in O(cache), so a
    re-run reads nothing that did not change.
  - With O(mode=record) the module hashes every file of the directory and returns the manifest text, for example
    to pin a verified copy; with O(dest) it also writes it there.
  - O(mode=verify) never reports a change; writing the hash cache does not count as one.
extends_documentation_fragment:
  - mindverse.sglang_pd.model_hash_cache
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads and hashes as usual; writes neither the hash cache nor O(dest).
  diff_mode:
    support: full
    details: With O(mode=record) and O(dest), the old and the new manifest text.
  platform:
    platforms: posix
options:
  path:
    description:
      - The model directory on the node, for example V(/models/GLM-4.6).
    type: path
    required: true
  manifest:
    description:
      - "Manifest text: one C(SHA256  SIZE  NAME) line per file (NAME relative to O(path), with C(/) between
        directories, no whitespace). Blank lines and lines starting with C(#) are ignored."
      - Roles pass the content of a manifest file, for example V({{ lookup('file', 'glm.sha256') }}).
      - Only used with O(mode=verify).
    type: str
  mode:
    description:
      - V(verify) checks the directory (and O(manifest) when given) and fails naming every problem.
      - V(record) hashes every regular file under O(path) (files and directories whose name starts with a dot are
        skipped, such as partial downloads) and returns the manifest.
    type: str
    choices: [verify, record]
    default: verify
  dest:
    description:
      - With O(mode=record), write the manifest to this file on the node when its content differs.
    type: path
notes:
  - A file whose size and modification time are unchanged is not hashed again; rewriting a file in place while
    keeping both would hide the change. Use O(cache='') to hash everything.
seealso:
  - module: mindverse.sglang_pd.model_stage
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Check the model directory against its pinned manifest before starting the servers
  mindverse.sglang_pd.model_weights:
    path: /models/GLM-4.6
    manifest: "{{ lookup('file', 'manifests/GLM-4.6.sha256') }}"

- name: Check only the layout and the shard sizes (no hashing)
  mindverse.sglang_pd.model_weights:
    path: /models/GLM-4.6

- name: Record the manifest of a verified copy
  mindverse.sglang_pd.model_weights:
    path: /models/GLM-4.6
    mode: record
    dest: /models/GLM-4.6.sha256
  register: glm_manifest
"""

RETURN = r"""
files:
  description: Number of files checked (O(mode=verify)) or recorded (O(mode=record)).
  returned: success or failed check
  type: int
  sample: 97
bytes:
  description: Total size of those files in bytes.
  returned: success or failed check
  type: int
  sample: 714212345678
hashed_bytes:
  description: Bytes read and hashed in this run; the hashes of the other files came from the cache.
  returned: success or failed check
  type: int
  sample: 0
cached_files:
  description: Number of files whose sha256 came from the cache.
  returned: success or failed check
  type: int
  sample: 93
problems:
  description: One entry per file that is not as expected (O(mode=verify)); the module fails when there is any.
  returned: success or failed check, with O(mode=verify)
  type: list
  elements: dict
  contains:
    file:
      description: Name relative to O(path); V(.) for the directory itself.
      type: str
      sample: model-00002-of-00003.safetensors
    expected:
      description: What the file should be.
      type: str
      sample: size 4194400 (from its safetensors header)
    found:
      description: What it is.
      type: str
      sample: size 1048576
manifest:
  description: Manifest text of the directory, sorted by name (O(mode=record)).
  returned: success, with O(mode=record)
  type: str
  sample: "5f0c3f8a3c5c8e0b8b1a27f1d3c4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f50  1234  config.json\n"
dest:
  description: Where the manifest was written (O(mode=record) with O(dest)).
  returned: success, with O(mode=record) and O(dest)
  type: str
  sample: /models/GLM-4.6.sha256
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._atomic_file import write_atomically
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._model_weights import (
    HashCache,
    format_manifest,
    parse_manifest,
    problems_message,
    record_manifest,
    save_cache,
    verify_dir,
)


def read_text(path):
    """Content of the file at ``path``, or None when there is none."""
    try:
        with open(path, 'r', encoding='utf-8') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def run_verify(module, cache):
    params = module.params
    manifest = None
    if params['manifest'] is not None:
        try:
            manifest = parse_manifest(params['manifest'])
        except ValueError as exc:
            module.fail_json(msg='Invalid manifest for %s: %s [SGLPD-MDL-001]' % (params['path'], exc))
    result = verify_dir(params['path'], manifest, cache)
    save_cache(module, cache)
    if result['problems']:
        module.fail_json(msg=problems_message(params['path'], result['problems']) + ' [SGLPD-MDL-004]', changed=False, **result)
    module.exit_json(changed=False, **result)


def run_record(module, cache):
    params = module.params
    try:
        entries = record_manifest(params['path'], cache)
    except (OSError, ValueError) as exc:
        module.fail_json(msg='Cannot record the manifest of %s: %s [SGLPD-MDL-005]' % (params['path'], exc))
    save_cache(module, cache)
    text = format_manifest(entries)
    result = dict(changed=False, manifest=text, files=len(entries), bytes=sum(size for dummy, size in entries.values()))
    dest = params['dest']
    if dest:
        result['dest'] = dest
        before = read_text(dest)
        if before != text:
            result['changed'] = True
            if module._diff:
                result['diff'] = dict(before=before or '', after=text, before_header=dest, after_header=dest)
            if not module.check_mode:
                try:
                    write_atomically(dest, text, 0o644)
                except OSError as exc:
                    module.fail_json(msg='Cannot write the manifest to %s: %s [SGLPD-MDL-005]' % (dest, exc))
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            manifest=dict(type='str'),
            mode=dict(type='str', default='verify', choices=['verify', 'record']),
            dest=dict(type='path'),
            cache=dict(type='path', default='/var/cache/sglang-pd/model-hashes.json'),
        ),
        supports_check_mode=True,
    )
    cache = HashCache(module.params['cache'] or None)
    if module.params['mode'] == 'record':
        run_record(module, cache)
    else:
        run_verify(module, cache)


if __name__ == '__main__':
    main()
