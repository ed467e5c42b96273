#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: render_files
short_description: Write many small text files under one folder in one call
version_added: 0.1.0
description:
  - Writes every file of O(files) under O(dest), creating the folders between, in one module call. Used by
    C(playbooks/render.yml) to write the launch files of a whole fleet (two files per service, thousands at
    1,000 nodes) where one M(ansible.builtin.copy) per file would cost a module run each.
  - A file is written only when its content or mode differs, through a temporary file in the same folder
    renamed over it, so a reader never sees half a file. Files under O(dest) that O(files) does not name are
    left alone.
  - Paths are relative to O(dest); an absolute path or one that leaves O(dest) (C(..)) is refused before
    anything is written.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports which files would be written; writes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  dest:
    description:
      - The folder the files are written under. It is created when missing (mode C(0755)).
    type: path
    required: true
  files:
    description:
      - The files to write.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - The file's path relative to O(dest), with C(/) between folders, for example V(pd-node-0/sglang-router.sh).
        type: str
        required: true
      content:
        description:
          - The file's text (UTF-8).
        type: str
        required: true
      mode:
        description:
          - The file's permissions, as an octal string.
        type: str
        default: '0644'
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Write the fleet's launch files on the controller
  mindverse.sglang_pd.render_files:
    dest: /tmp/render
    files: "{{ __sglang_pd_model | mindverse.sglang_pd.pd_render_files }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
written:
  description: The paths (relative to O(dest)) written, or that would be written in check mode.
  returned: always
  type: list
  elements: str
  sample: [pd-node-0/sglang-router.json, pd-node-0/sglang-router.sh]
unchanged:
  description: How many files already held the content and mode asked for.
  returned: always
  type: int
  sample: 12
"""

import os
import posixpath
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule


def checked_paths(dest, files):
    """(absolute path, file) for each file, or a list of problems when a path is not inside DEST."""
    problems, result, seen = [], [], set()
    for item in files:
        rel = item['path']
        norm = posixpath.normpath(rel)
        if not rel or rel.startswith('/') or norm == '.' or norm.startswith('../') or norm == '..':
            problems.append(f"{rel!r}: write a path relative to dest, inside it")
            continue
        if norm in seen:
            problems.append(f"{rel!r}: named twice")
            continue
        seen.add(norm)
        result.append((os.path.join(dest, *norm.split('/')), item))
    return problems, result


def file_mode(item):
    """The mode of ITEM as an int, or None when it is not an octal string."""
    try:
        value = int(str(item.get('mode') or '0644'), 8)
    except ValueError:
        return None
    return value if 0 <= value <= 0o7777 else None


def needs_write(path, data, mode):
    """True when PATH does not hold exactly DATA with MODE."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != mode or info.st_size != len(data):
        return True
    with open(path, 'rb') as handle:
        return handle.read() != data


def write_atomic(path, data, mode):
    """Write DATA to PATH through a temporary file in the same folder, then rename it over PATH."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=folder, prefix='.render-')
    try:
        with os.fdopen(handle, 'wb') as out:
            out.write(data)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type='path', required=True),
            files=dict(type='list', elements='dict', required=True, options=dict(
                path=dict(type='str', required=True),
                content=dict(type='str', required=True),
                mode=dict(type='str', default='0644'),
            )),
        ),
        supports_check_mode=True,
    )
    dest = os.path.abspath(module.params['dest'])
    problems, targets = checked_paths(dest, module.params['files'])
    for _path, item in targets:
        if file_mode(item) is None:
            problems.append(f"{item['path']!r}: mode {item.get('mode')!r} is not an octal string such as '0644'")
    if problems:
        module.fail_json(msg=f"Nothing was written under {dest}: " + '; '.join(problems))
    written, unchanged = [], 0
    for path, item in targets:
        data = item['content'].encode('utf-8')
        mode = file_mode(item)
        if not needs_write(path, data, mode):
            unchanged += 1
            continue
        written.append(item['path'])
        if not module.check_mode:
            try:
                write_atomic(path, data, mode)
            except OSError as exc:
                module.fail_json(msg=f"Cannot write {path}: {exc}", written=written[:-1], unchanged=unchanged)
    module.exit_json(changed=bool(written), written=written, unchanged=unchanged)


if __name__ == '__main__':
    main()
