# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""A lock file that one ansible-playbook run holds while it changes a fleet.

The file is created atomically (``O_CREAT | O_EXCL``) and holds JSON: the run's ``run_id``
and who holds it (``controller``, ``user``, ``pid``, ``playbook``) ``since`` when. A lock
held by a run that is gone is stale: a run on the same controller sees that its process no
longer exists and takes the lock over; any run takes it over when told to break it.

A run holds the lock on the controller (``controller_lock``, the file's path there) for as long
as it holds the lock on any lock host: on a lock host, a lock of the same controller and
controller lock file as the run taking it belongs to a run that is gone.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time

# Seconds between two attempts while waiting for another run's lock.
POLL_INTERVAL = 2.0
HOLDER_KEYS = ('run_id', 'controller', 'user', 'pid', 'playbook', 'controller_lock')


class LockError(Exception):
    """The lock is held by another run, or cannot be read or written."""

    def __init__(self, msg, holder=None):
        super().__init__(msg)
        self.msg = msg
        self.holder = holder


def describe(holder):
    """``user@controller (pid N, playbook P) since T`` for a message."""
    if not holder:
        return 'an unknown run'
    since = holder.get('since')
    when = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(since)) if isinstance(since, (int, float)) else '?'
    return '%s@%s (pid %s, %s) since %s' % (holder.get('user', '?'), holder.get('controller', '?'),
                                            holder.get('pid', '?'), holder.get('playbook', '?'), when)


def process_alive(pid):
    """Whether a process PID exists on this machine."""
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError):
        return False
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def _proc(pid):
    """``(parent pid, argv, start time)`` of PID from /proc, or None."""
    try:
        with open('/proc/%d/stat' % pid, encoding='utf-8') as handle:
            stat = handle.read()
        with open('/proc/%d/cmdline' % pid, 'rb') as handle:
            argv = handle.read().decode('utf-8', 'replace').split('\0')
    except OSError:
        return None
    fields = stat[stat.rindex(')') + 2:].split()
    return int(fields[1]), argv, fields[19]


def is_ansible_playbook(argv):
    """Whether ARGV runs ansible-playbook (itself, or as the script of a Python interpreter)."""
    names = [os.path.basename(arg) for arg in argv[:2]]
    return bool(names) and (names[0] == 'ansible-playbook'
                            or (names[0].startswith('python') and names[1:] == ['ansible-playbook']))


def find_run(start=None):
    """``(pid, run_id)`` of the ansible-playbook run this process belongs to, or ``(None, None)``.

    A module runs under a worker of ansible-playbook, itself a fork of the run's main
    process; both show ``ansible-playbook`` as their command. The run is the topmost of the
    consecutive ``ansible-playbook`` ancestors (an ansible-playbook started by a task of
    another run is a run of its own). Its id joins host, pid and the process start time.
    """
    pid = start or os.getppid()
    found = None
    while pid and pid > 1:
        info = _proc(pid)
        if info is None:
            break
        parent, argv, started = info
        if is_ansible_playbook(argv):
            found = (pid, started)
        elif found:
            break
        pid = parent
    if not found:
        return None, None
    return found[0], '%s:%d:%s' % (socket.gethostname(), found[0], found[1])


def read(path):
    """The holder recorded in PATH, ``None`` when there is no lock, ``{}`` when it is unreadable."""
    try:
        with open(path, encoding='utf-8') as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _create(path, holder):
    """Create PATH holding HOLDER; False when it exists already."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, 'w', encoding='utf-8') as handle:
        json.dump(holder, handle, sort_keys=True)
        handle.write('\n')
    return True


class FleetLock:
    """Take or release the lock in PATH for the run HOLDER (``run_id`` and who)."""

    def __init__(self, path, holder, local=False, stale_run_ids=(), break_lock=False, wait=0.0,
                 check_mode=False, clock=time.time, sleep=time.sleep):
        self.path = path
        self.holder = dict((k, holder.get(k)) for k in HOLDER_KEYS)
        self.local = local
        self.stale_run_ids = set(stale_run_ids or ())
        self.break_lock = break_lock
        self.wait = wait
        self.check_mode = check_mode
        self.clock, self.sleep = clock, sleep

    def _why_stale(self, current):
        """Why CURRENT (another run's holder) may be taken over, or None while it may be alive."""
        if self.break_lock:
            return 'broken on request (sglang_pd_break_lock)'
        if current == {}:
            return 'unreadable'
        if current.get('run_id') in self.stale_run_ids:
            return 'its run is gone (found stale on the controller)'
        if self.local and current.get('controller') == self.holder.get('controller') and not process_alive(current.get('pid')):
            return 'its run is gone (no process %s on %s)' % (current.get('pid'), current.get('controller'))
        if (not self.local and self.holder.get('controller_lock')
                and (current.get('controller'), current.get('controller_lock')) == (self.holder['controller'], self.holder['controller_lock'])):
            return 'its run is gone (this run holds its lock %s on %s now)' % (current['controller_lock'], current['controller'])
        return None

    def acquire(self):
        """Return ``{changed, holder, taken_over}``; raise ``LockError`` when another run holds it."""
        deadline = self.clock() + max(0.0, float(self.wait))
        while True:
            current = read(self.path)
            if current is not None and current.get('run_id') == self.holder['run_id']:
                return dict(changed=False, holder=current, taken_over=None)
            stale = None if current is None else self._why_stale(current)
            if current is None or stale:
                mine = dict(self.holder, since=round(self.clock(), 3))
                if self.check_mode:
                    return dict(changed=True, holder=mine, taken_over=current and dict(current, reason=stale))
                if stale:
                    self._remove_if(current)
                if _create(self.path, mine):
                    return dict(changed=True, holder=mine, taken_over=current and dict(current, reason=stale))
                continue  # another run was quicker: read its lock
            if self.clock() >= deadline:
                raise LockError(
                    'The fleet is locked by %s: another run is changing it (lock %s). Wait until it ends '
                    '(-e sglang_pd_lock_wait=SECONDS waits for it), or, if that run is gone, break the lock '
                    'with -e sglang_pd_break_lock=true.' % (describe(current), self.path), holder=current)
            self.sleep(POLL_INTERVAL)

    def _remove_if(self, expected):
        """Remove the lock file if it still holds EXPECTED."""
        if read(self.path) == expected:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def release(self):
        """Remove the lock when this run holds it (or when told to break it); ``{changed, holder}``."""
        current = read(self.path)
        if current is None:
            return dict(changed=False, holder=None)
        if current.get('run_id') != self.holder['run_id'] and not self.break_lock:
            return dict(changed=False, holder=current)
        if not self.check_mode:
            self._remove_if(current)
        return dict(changed=True, holder=current)
