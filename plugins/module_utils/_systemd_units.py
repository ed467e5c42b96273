# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""The state of systemd units, read in one ``systemctl show`` call (file_set, settled_state)."""

from __future__ import annotations

UNIT_PROPERTIES = ('ActiveState', 'UnitFileState', 'NeedDaemonReload')


def unit_states(module, names):
    """The state of each systemd unit of NAMES, read in one systemctl call; {} when it cannot be read."""
    systemctl = module.get_bin_path('systemctl') if names else None
    if systemctl is None:
        return {}
    rc, out, dummy = module.run_command([systemctl, 'show', '--property=' + ','.join(UNIT_PROPERTIES), '--', *names])
    # systemctl prints one block of NAME=VALUE lines per unit, in the order asked, a blank line between.
    blocks = out.strip().split('\n\n') if rc == 0 else []
    if len(blocks) != len(names):
        return {}
    states = {}
    for name, block in zip(names, blocks):
        props = dict(line.split('=', 1) for line in block.splitlines() if '=' in line)
        states[name] = {'active_state': props.get('ActiveState', ''), 'unit_file_state': props.get('UnitFileState', ''),
                        'need_daemon_reload': props.get('NeedDaemonReload', 'no') == 'yes'}
    return states


def units_up(states):
    """The units of STATES that run, enabled, from the unit file on disk."""
    return [name for name, state in states.items()
            if state['active_state'] == 'active' and state['unit_file_state'] == 'enabled'
            and not state['need_daemon_reload']]
