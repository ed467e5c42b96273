#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_set
short_description: Write a set of small text files in one call, each only when it differs
version_added: 0.1.0
description:
  - Writes every file of O(files) and O(secret_files), creates O(directories) and removes O(absent), in one module
    call. One M(ansible.builtin.copy) or M(ansible.builtin.template) per file costs a round trip to the node each
    (two when it checks first); a service's environment, secrets, launch script, unit and follower cost one call
    here, and a no-op run reads them without writing.
  - A file is written only when its content, mode, owner or group differs, through a temporary file in the same
    folder renamed over it, so a reader never sees half a file. Folders between are created (mode C(0755)).
  - With O(dest), paths are relative to it and may not leave it (the render of a whole fleet on the controller);
    without it, paths must be absolute. A bad path or mode is refused before anything is written.
  - The content of O(secret_files) is never returned, logged or shown in a diff.
  - A file with a C(validate) command is checked in its temporary file before the rename; a refused file is not
    written, and the call fails naming it (files written before it stay written).
  - With O(units), it also reads the state of the systemd units these files configure, after writing them, in the
    same call. A caller that wrote nothing skips starting a unit listed in RV(units_up), so that on a no-op run a
    service costs one round trip, not two.
  - Its action plugin adds what a call on a node asks for (without O(dest), not delegated to another host) to the
    host fact C(__sglang_pd_managed), also in check mode, which the end of C(site.yml) records
    (M(mindverse.sglang_pd.settled_state)). Each file's sha256 is kept, never a secret file's content or digest.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports which paths would change; writes and removes nothing.
  diff_mode:
    support: full
    details: The old and new text of each changed file of O(files); never of O(secret_files).
  platform:
    platforms: posix
options:
  dest:
    description:
      - The folder the relative paths of O(files) and O(secret_files) are written under. It is created when missing.
      - Without it every path must be absolute.
    type: path
  files:
    description:
      - The files to write.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - The file's path, absolute, or relative to O(dest) with C(/) between folders.
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
      validate:
        description:
          - A command that checks the file before it replaces the old one, with C(%s) where the temporary file's
            path goes (as M(ansible.builtin.template)'s O(ansible.builtin.template#module:validate)). Run only when
            the file is written, not in check mode.
        type: str
  secret_files:
    description:
      - Files like O(files) whose content is a secret (API keys), never returned, logged or shown in a diff.
      - Every value of these entries is masked in the logs, so their paths show as masked in RV(changed_paths).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - The file's path, as in O(files).
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
        default: '0600'
  directories:
    description:
      - Folders to create when missing, and whose mode, owner and group to set. A change to one is reported in
        RV(changed_paths) like a file's.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description:
          - The folder's path, as in O(files).
        type: str
        required: true
      mode:
        description:
          - The folder's permissions, as an octal string.
        type: str
        default: '0755'
  absent:
    description:
      - Files to remove when they exist.
    type: list
    elements: str
    default: []
  owner:
    description:
      - The owner of every file and folder this call writes or creates (a user name). Unchanged when not given.
    type: str
  group:
    description:
      - The group of every file and folder this call writes or creates (a group name). Unchanged when not given.
    type: str
  units:
    description:
      - systemd units whose state to read after the files are written (also in check mode). Reading changes
        nothing; without C(systemctl) on the host, or when it cannot read them, no unit is reported.
    type: list
    elements: str
    default: []
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Write the fleet's launch files on the controller
  mindverse.sglang_pd.file_set:
    dest: /tmp/render
    files: "{{ __sglang_pd_preflight.model | mindverse.sglang_pd.pd_render_files }}"
  delegate_to: localhost
  run_once: true

- name: Write the files of one service
  mindverse.sglang_pd.file_set:
    owner: root
    group: root
    directories:
      - {path: /etc/sglang-pd, mode: '0750'}
    files:
      - {path: /etc/sglang-pd/sglang-router.env, content: "HF_HUB_OFFLINE=1\n", mode: '0600'}
      - path: /etc/systemd/system/sglang-router.service
        content: "{{ lookup('ansible.builtin.template', 'unit.service.j2') }}"
      - path: /etc/sglang-pd/firewall.nft
        content: "{{ lookup('ansible.builtin.template', 'sglang_pd.nft.j2') }}"
        mode: '0640'
        validate: /usr/sbin/nft --check --file %s
    secret_files:
      - {path: /etc/sglang-pd/sglang-router.secret.json, content: "{{ secret | to_json }}"}
    units: [sglang-router]
  register: written

- name: Start the service, unless nothing was written and it runs, enabled, from its current unit file
  ansible.builtin.systemd_service:
    name: sglang-router
    enabled: true
    daemon_reload: "{{ '/etc/systemd/system/sglang-router.service' in written.written }}"
    state: "{{ 'restarted' if written.written else 'started' }}"
  when: written.written or 'sglang-router' not in written.units_up
"""

RETURN = r"""
changed_paths:
  description: The paths (as given) written, created or removed, or that would be in check mode.
  returned: always
  type: list
  elements: str
  sample: [/etc/sglang-pd/sglang-router.env]
written:
  description: The paths of O(files) and O(secret_files) written, or that would be written in check mode.
  returned: always
  type: list
  elements: str
  sample: [pd-node-0/sglang-router.json, pd-node-0/sglang-router.sh]
created:
  description:
    - The paths of RV(written) that did not exist before this call.
    - A caller can tell a new file from a changed one, for instance a new systemd unit, which has no state to reset.
  returned: always
  type: list
  elements: str
  sample: [pd-node-0/sglang-router.sh]
unchanged:
  description: How many files already held the content, mode, owner and group asked for.
  returned: always
  type: int
  sample: 12
units:
  description:
    - The state of each unit of O(units) (by the name given), as systemd reports it after this call's writes.
  returned: when O(units) is given and C(systemctl) could read them
  type: dict
  sample: {sglang-router: {active_state: active, unit_file_state: enabled, need_daemon_reload: false}}
units_up:
  description:
    - The units of O(units) that are active and enabled, and whose unit file systemd has loaded as it is on disk.
      Starting or enabling one of them again would change nothing.
  returned: always
  type: list
  elements: str
  sample: [sglang-router]
"""

import grp
import os
import posixpath
import pwd
import shlex
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._atomic_file import staged
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._systemd_units import unit_states, units_up


def resolve(dest, path):
    """The absolute path of PATH, or None when it is not allowed (outside DEST, or relative without it)."""
    if dest is None:
        if not path.startswith('/'):
            return None
        return posixpath.normpath(path)
    norm = posixpath.normpath(path)
    if not path or path.startswith('/') or norm in ('.', '..') or norm.startswith('../'):
        return None
    return os.path.join(dest, *norm.split('/'))


def octal_mode(text):
    """TEXT as a permission mode, or None when it is not an octal string."""
    try:
        value = int(str(text), 8)
    except ValueError:
        return None
    return value if 0 <= value <= 0o7777 else None


def plan(module, dest):
    """Every entry with its absolute path and mode, or fail naming every bad one (nothing written)."""
    problems, entries, seen = [], [], set()
    where = 'write a path relative to dest, inside it' if dest else 'write an absolute path'
    groups = (('files', False), ('secret_files', True), ('directories', None))
    for option, secret in groups:
        for item in module.params[option]:
            target = resolve(dest, item['path'])
            mode = octal_mode(item['mode'])
            if target is None:
                problems.append(f"{item['path']!r}: {where}")
            elif target in seen:
                problems.append(f"{item['path']!r}: named twice")
            elif mode is None:
                problems.append(f"{item['path']!r}: mode {item['mode']!r} is not an octal string such as '0644'")
            elif item.get('validate') is not None and '%s' not in item['validate']:
                problems.append(f"{item['path']!r}: validate must contain %s where the file's path goes")
            else:
                seen.add(target)
                entries.append({'path': item['path'], 'target': target, 'mode': mode, 'secret': secret,
                                'directory': secret is None, 'content': item.get('content'),
                                'validate': item.get('validate')})
    absent = []
    for path in module.params['absent']:
        target = resolve(dest, path)
        if target is None:
            problems.append(f"{path!r}: {where}")
        else:
            absent.append((path, target))
    if problems:
        module.fail_json(msg='Nothing was changed: ' + '; '.join(problems) + ' [SGLPD-SVC-001]')
    return entries, absent


def ids(module):
    """(uid, gid) of the owner and group asked for; -1 for one not given."""
    uid = gid = -1
    try:
        if module.params['owner']:
            uid = pwd.getpwnam(module.params['owner']).pw_uid
        if module.params['group']:
            gid = grp.getgrnam(module.params['group']).gr_gid
    except KeyError as exc:
        module.fail_json(msg=f"Nothing was changed: no such user or group {exc} [SGLPD-SVC-002]")
    return uid, gid


def differs(info, mode, uid, gid):
    """True when the stat INFO does not have MODE, UID and GID (-1: any)."""
    return (stat.S_IMODE(info.st_mode) != mode or (uid != -1 and info.st_uid != uid)
            or (gid != -1 and info.st_gid != gid))


def current_text(target, data):
    """What TARGET holds now (None when missing), and whether it equals DATA."""
    try:
        with open(target, 'rb') as handle:
            old = handle.read()
    except FileNotFoundError:
        return None, False
    return old, old == data


class Refused(Exception):
    """The validate command refused a file."""


def apply_directory(module, entry, uid, gid):
    """Create or fix one folder; True when it changed (or would)."""
    try:
        info = os.stat(entry['target'])
    except FileNotFoundError:
        info = None
    if info is not None and not differs(info, entry['mode'], uid, gid):
        return False
    if not module.check_mode:
        os.makedirs(entry['target'], mode=entry['mode'], exist_ok=True)
        os.chmod(entry['target'], entry['mode'])
        if uid != -1 or gid != -1:
            os.chown(entry['target'], uid, gid)
    return True


def apply_file(module, entry, uid, gid, diffs):
    """Write one file when it differs; True when it changed (or would)."""
    data = entry['content'].encode('utf-8')
    old, same = current_text(entry['target'], data)
    if same and not differs(os.stat(entry['target']), entry['mode'], uid, gid):
        return False
    if module._diff and not entry['secret'] and not same:
        diffs.append({'before_header': entry['path'], 'after_header': entry['path'],
                      'before': '' if old is None else old.decode('utf-8', 'replace'), 'after': entry['content']})
    if not module.check_mode:
        with staged(entry['target'], data, entry['mode'], uid, gid) as temp:
            if entry['validate'] is not None:
                rc, out, err = module.run_command(entry['validate'].replace('%s', shlex.quote(temp)))
                if rc != 0:
                    raise Refused(f"{entry['path']} was not written: {entry['validate']!r} refused it "
                                  f"(rc {rc}): {(err or out).strip()}")
    return True


def main():
    entry_options = dict(path=dict(type='str', required=True), content=dict(type='str', required=True),
                         mode=dict(type='str', default='0644'), validate=dict(type='str'))
    secret_options = dict(path=dict(type='str', required=True), content=dict(type='str', required=True),
                          mode=dict(type='str', default='0600'))
    module = AnsibleModule(
        argument_spec=dict(
            dest=dict(type='path'),
            files=dict(type='list', elements='dict', default=[], options=entry_options),
            # no_log: every value of these entries is kept out of the logs (a secret's path is masked too).
            secret_files=dict(type='list', elements='dict', default=[], options=secret_options, no_log=True),
            directories=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='str', required=True), mode=dict(type='str', default='0755'))),
            absent=dict(type='list', elements='str', default=[]),
            owner=dict(type='str'),
            group=dict(type='str'),
            units=dict(type='list', elements='str', default=[]),
        ),
        supports_check_mode=True,
    )
    dest = os.path.abspath(module.params['dest']) if module.params['dest'] else None
    entries, absent = plan(module, dest)
    uid, gid = ids(module)
    changed_paths, written, created, unchanged, diffs = [], [], [], 0, []
    for entry in entries:
        existed = os.path.lexists(entry['target'])
        try:
            if entry['directory']:
                changed = apply_directory(module, entry, uid, gid)
            else:
                changed = apply_file(module, entry, uid, gid, diffs)
        except Refused as exc:
            module.fail_json(msg=f'{exc} [SGLPD-SVC-003]', changed_paths=changed_paths, written=written)
        except OSError as exc:
            module.fail_json(msg=f"Cannot write {entry['path']}: {exc.strerror or exc} [SGLPD-SVC-004]", changed_paths=changed_paths)
        if changed:
            changed_paths.append(entry['path'])
            if not entry['directory']:
                written.append(entry['path'])
                if not existed:
                    created.append(entry['path'])
        elif not entry['directory']:
            unchanged += 1
    for path, target in absent:
        if os.path.lexists(target):
            changed_paths.append(path)
            if not module.check_mode:
                try:
                    os.unlink(target)
                except OSError as exc:
                    module.fail_json(msg=f"Cannot remove {path}: {exc.strerror or exc} [SGLPD-SVC-004]", changed_paths=changed_paths)
    result = dict(changed=bool(changed_paths), changed_paths=changed_paths, written=written, created=created,
                  unchanged=unchanged)
    states = unit_states(module, module.params['units'])
    result['units_up'] = units_up(states)
    if states:
        result['units'] = states
    if diffs:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
