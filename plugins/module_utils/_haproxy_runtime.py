# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""One HAProxy backend server's state through HAProxy's runtime API (private: the API may change).

The runtime API is HAProxy's stats socket: a client connects, writes one command and a newline,
and HAProxy answers and closes the connection. Two answers are read here:

* ``show servers state BACKEND``: a version line, a ``#`` header, then one line of space-separated
  fields per server; ``srv_admin_state`` holds the admin flags the operator sets
  (``set server B/S state ...``): 0x01 forced maintenance, 0x08 forced drain.
* ``show stat``: CSV with a ``# `` header; ``scur`` is the sessions a server holds now.
"""

from __future__ import annotations

import csv
import io
import socket
import time

STATES = ('ready', 'drain', 'maint')
FORCED_MAINT = 0x01
FORCED_DRAIN = 0x08


class HAProxyRuntimeError(Exception):
    """HAProxy's runtime socket could not be reached, or refused a command."""


def run_command(path, command, timeout=5.0):
    """HAProxy's answer to COMMAND on the runtime socket at PATH, as text."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(timeout)
            client.connect(path)
            client.sendall(command.encode() + b'\n')
            chunks = []
            while True:
                chunk = client.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError as exc:
        raise HAProxyRuntimeError(f'HAProxy runtime socket {path}: {exc}; is HAProxy running, with this stats socket '
                                  f'at level admin, and is the task run as root?') from exc
    return b''.join(chunks).decode(errors='replace')


def parse_servers_state(text):
    """``{server name: fields}`` of a ``show servers state`` answer (fields named by its header)."""
    header, servers = None, {}
    for line in text.splitlines():
        if line.startswith('#'):
            header = line.lstrip('#').split()
        elif header and line.strip():
            fields = dict(zip(header, line.split()))
            if 'srv_name' in fields:
                servers[fields['srv_name']] = fields
    return servers


def admin_state(fields):
    """The state an operator set on a server (``ready``, ``drain`` or ``maint``), from its admin flags."""
    flags = int(fields['srv_admin_state'])
    if flags & FORCED_MAINT:
        return 'maint'
    if flags & FORCED_DRAIN:
        return 'drain'
    return 'ready'


def parse_stat(text):
    """The rows of a ``show stat`` answer, each a dict keyed by the CSV header's names."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith('# '):
        raise HAProxyRuntimeError(f'expected show stat CSV with a "# pxname,svname,..." header, got {text[:200]!r}')
    lines[0] = lines[0][2:]
    return list(csv.DictReader(io.StringIO('\n'.join(lines))))


def server_sessions(rows, backend, server):
    """The current sessions (``scur``) of BACKEND/SERVER in ``parse_stat`` ROWS, or None when it is not listed."""
    for row in rows:
        if row.get('pxname') == backend and row.get('svname') == server:
            return int(row.get('scur') or 0)
    return None


class BackendServer:
    """One server of one backend, read and set through the runtime socket at PATH."""

    def __init__(self, path, backend, server, timeout=5.0):
        self.path, self.backend, self.server, self.timeout = path, backend, server, timeout

    def _command(self, command):
        return run_command(self.path, command, self.timeout)

    def state(self):
        answer = self._command(f'show servers state {self.backend}')
        servers = parse_servers_state(answer)
        if self.server not in servers:
            listed = ', '.join(sorted(servers)) or 'none'
            raise HAProxyRuntimeError(f'HAProxy has no server {self.backend}/{self.server} (servers of that backend: {listed}; '
                                      f'HAProxy answered {answer.strip()[:200]!r})')
        return admin_state(servers[self.server])

    def set_state(self, state):
        answer = self._command(f'set server {self.backend}/{self.server} state {state}').strip()
        if answer:
            raise HAProxyRuntimeError(f'HAProxy refused "set server {self.backend}/{self.server} state {state}": {answer}')

    def sessions(self):
        found = server_sessions(parse_stat(self._command('show stat')), self.backend, self.server)
        if found is None:
            raise HAProxyRuntimeError(f'HAProxy lists no server {self.backend}/{self.server} in show stat')
        return found

    def wait_idle(self, timeout, interval=0.2, clock=time.monotonic, sleep=time.sleep):
        """Read the server's sessions until none is left; ``(idle, readings)`` (readings oldest first)."""
        deadline, readings = clock() + timeout, []
        while True:
            readings.append(self.sessions())
            if readings[-1] == 0:
                return True, readings
            if clock() >= deadline:
                return False, readings
            sleep(interval)


def run_server_module(module):
    """The sglang_lb_server module: set one server's state, then wait for its sessions to end."""
    params = module.params
    server = BackendServer(params['socket'], params['backend'], params['server'])
    try:
        before = server.state()
        wanted = params['state']
        changed = before != wanted
        if changed and not module.check_mode:
            server.set_state(wanted)
        after = wanted if module.check_mode else server.state()
        result = dict(changed=changed, backend=params['backend'], server=params['server'],
                      state_before=before, state_after=after, diff=dict(before=dict(state=before), after=dict(state=after)))
        if params['wait_idle'] and wanted != 'ready' and not module.check_mode:
            idle, readings = server.wait_idle(params['timeout'])
            result.update(idle=idle, sessions=readings[-1], sessions_seen=readings[-20:])
            if not idle:
                module.fail_json(msg=f"{params['backend']}/{params['server']} still holds {readings[-1]} sessions after "
                                     f"{params['timeout']} s in state {after}; raise timeout, or find the client "
                                     f"that holds them (show sess on the runtime socket) [SGLPD-DRN-002]", **result)
        else:
            sessions = server.sessions()
            result.update(idle=sessions == 0, sessions=sessions, sessions_seen=[sessions])
    except HAProxyRuntimeError as exc:
        module.fail_json(msg=f'{exc} [SGLPD-LBR-001]')
    module.exit_json(**result)
