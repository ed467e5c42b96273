# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""What a node holds of the deployment, read in one pass, and how it differs from a record (settled_state).

Observed, for the paths and units a run of site.yml managed: each file's sha256, mode and owner (a secret
file's size and modification time instead: its content is read by no one here), each folder's mode and
owner, whether a removed path came back, each unit's state, each model folder's listing (names, sizes,
modification times), the containers the services run (service label, image ID, state) and the nftables
tables of the deployment (their rules, without counters).
"""

from __future__ import annotations

import hashlib
import os
import stat

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._systemd_units import unit_states

SERVICE_LABEL = 'org.mindverse.sglang_pd.service'
TABLE_PREFIX = 'sglang'

try:
    import docker
except ImportError:  # the containers are then reported as unreadable
    docker = None


def file_state(path, secret):
    """Mode, owner and sha256 (secret: size and mtime) of the file PATH; None when it is missing."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    state = {'mode': f'{stat.S_IMODE(info.st_mode):04o}', 'uid': info.st_uid, 'gid': info.st_gid}
    if secret:
        state.update(secret=True, size=info.st_size, mtime_ns=info.st_mtime_ns)
        return state
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for block in iter(lambda: handle.read(1 << 20), b''):
            digest.update(block)
    state['sha256'] = digest.hexdigest()
    return state


def directory_state(path):
    """Mode and owner of the folder PATH; None when it is missing."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return {'mode': f'{stat.S_IMODE(info.st_mode):04o}', 'uid': info.st_uid, 'gid': info.st_gid}


def tree_state(path):
    """sha256 of the listing of the folder PATH (each file's relative name, size and mtime); None when missing."""
    if not os.path.isdir(path):
        return None
    listing = []
    for folder, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(folder, name)
            info = os.lstat(full)
            listing.append(f'{os.path.relpath(full, path)}\0{info.st_size}\0{info.st_mtime_ns}')
    return hashlib.sha256('\n'.join(listing).encode('utf-8', 'surrogateescape')).hexdigest()


def container_states():
    """{service label: {image ID, state}} of the containers the services run; None when Docker cannot be read."""
    if docker is None:
        return None
    try:
        client = docker.from_env(timeout=30)
        listed = client.api.containers(all=True, filters={'label': SERVICE_LABEL})
    except Exception:  # pylint: disable=broad-exception-caught  # no daemon, no socket: nothing readable
        return None
    return {item['Labels'][SERVICE_LABEL]: {'image': item.get('ImageID', ''), 'state': item.get('State', '')}
            for item in listed}


def table_states(module):
    """{'FAMILY NAME': sha256 of its rules without counters} of the nftables tables named sglang*; {} without nft."""
    nft = module.get_bin_path('nft')
    if nft is None:
        return {}
    rc, out, dummy = module.run_command([nft, 'list', 'tables'])
    if rc != 0:
        return None
    tables = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) == 3 and words[0] == 'table' and words[2].startswith(TABLE_PREFIX):
            rc, rules, dummy = module.run_command([nft, '--stateless', 'list', 'table', words[1], words[2]])
            tables[f'{words[1]} {words[2]}'] = hashlib.sha256(rules.encode('utf-8')).hexdigest() if rc == 0 else None
    return tables


def observe(module, files, directories, absent, units, trees):
    """What the node holds now of FILES ({path: secret}), DIRECTORIES, ABSENT, UNITS and TREES, and its containers
    and tables."""
    states = unit_states(module, list(units))
    return {
        'files': {path: file_state(path, secret) for path, secret in sorted(files.items())},
        'directories': {path: directory_state(path) for path in sorted(directories)},
        'absent': {path: os.path.lexists(path) for path in sorted(absent)},
        'units': {name: states.get(name) for name in sorted(units)},
        'trees': {path: tree_state(path) for path in sorted(trees)},
        'containers': container_states(),
        'tables': table_states(module),
    }


def _ids(owner, group):
    """(uid, gid) of the names OWNER and GROUP, None for one not given or unknown."""
    import grp  # pylint: disable=import-outside-toplevel
    import pwd  # pylint: disable=import-outside-toplevel
    try:
        uid = pwd.getpwnam(owner).pw_uid if owner else None
    except KeyError:
        uid = None
    try:
        gid = grp.getgrnam(group).gr_gid if group else None
    except KeyError:
        gid = None
    return uid, gid


def unlike_desired(observed, managed):
    """Where OBSERVED is not what MANAGED (the desired state a run wrote) asks for; [] when it is."""
    found = []
    for kind, paths in (('file', managed.get('files', {})), ('folder', managed.get('directories', {}))):
        for path, desired in sorted(paths.items()):
            state = observed['files' if kind == 'file' else 'directories'].get(path)
            uid, gid = _ids(desired.get('owner'), desired.get('group'))
            if state is None:
                found.append(f'{kind} {path} is missing')
            elif 'sha256' in desired and state.get('sha256') != desired['sha256']:
                found.append(f'{kind} {path} does not hold what the run wrote')
            elif int(state['mode'], 8) != int(desired['mode'], 8):
                found.append(f"{kind} {path} has mode {state['mode']}, not {desired['mode']}")
            elif (uid is not None and state['uid'] != uid) or (gid is not None and state['gid'] != gid):
                found.append(f'{kind} {path} has another owner or group')
    found += [f'{path} exists again' for path, there in observed['absent'].items() if there]
    for name, state in observed['units'].items():
        if state is None or state['active_state'] != 'active' or state['unit_file_state'] != 'enabled' \
                or state['need_daemon_reload']:
            found.append(f'unit {name} is not active, enabled and loaded from its file ({state})')
    found += [f'model folder {path} is missing' for path, state in observed['trees'].items() if state is None]
    if observed['containers'] is None:
        found.append('the containers could not be read from Docker')
    return found


def changes(recorded, observed):
    """What differs between the RECORDED and the OBSERVED state of a node, one line each; [] when nothing."""
    found = []
    labels = {'files': 'file', 'directories': 'folder', 'absent': 'removed path', 'units': 'unit',
              'trees': 'model folder', 'containers': 'container of service', 'tables': 'nftables table'}
    for key, label in labels.items():
        before, now = recorded.get(key), observed.get(key)
        if before is None or now is None:
            if before != now:
                found.append(f'{label}s: could not be read {"then" if before is None else "now"}')
            continue
        for name in sorted(set(before) | set(now)):
            if name not in now:
                found.append(f'{label} {name} is gone')
            elif name not in before:
                found.append(f'{label} {name} is new')
            elif before[name] != now[name]:
                found.append(f'{label} {name} changed')
    return found
