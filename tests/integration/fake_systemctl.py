"""A systemctl for the integration tests that run the service role on this machine (systemd is not PID 1 here).

`install(bin_dir, log)` writes it as BIN_DIR/systemctl. It answers as systemd does for a unit that is
loaded, active and enabled (`show` for every unit named, `is-enabled`, `is-active`: the unit's state,
`active` unless told), does nothing else, and
appends each call's arguments, one call a line, to LOG.
"""

from __future__ import annotations

SCRIPT = r"""#!/bin/sh
echo "$*" >> '{log}'
case "$1" in
  show)
    shift
    for unit in "$@"; do
      case "$unit" in --*) ;; *)
        printf 'Id=%s.service\nLoadState=loaded\nActiveState=active\nUnitFileState=enabled\nNeedDaemonReload=no\n\n' "$unit";;
      esac
    done;;
  is-enabled) echo enabled;;
  is-active) echo '{active}';;
esac
exit 0
"""


def install(bin_dir, log, active='active'):
    """BIN_DIR/systemctl, logging to LOG (both pathlib paths); BIN_DIR is created. ACTIVE: what is-active answers."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    systemctl = bin_dir / 'systemctl'
    systemctl.write_text(SCRIPT.format(log=log, active=active))
    systemctl.chmod(0o755)
    return systemctl
