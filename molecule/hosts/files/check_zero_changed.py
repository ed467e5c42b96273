# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Run a playbook in check mode with ansible-runner; exit 1 naming each task that changed
or failed, exit 0 when every task reported ok or skipped.

Usage: check_zero_changed.py PLAYBOOK INVENTORY
"""

import shutil
import sys
import tempfile

import ansible_runner


def main():
    playbook, inventory = sys.argv[1:3]
    work = tempfile.mkdtemp(prefix="check-zero-changed-")
    try:
        runner = ansible_runner.run(
            private_data_dir=work,
            playbook=playbook,
            inventory=inventory,
            cmdline="--check",
            quiet=True,
        )
        changed, failed = [], []
        for event in runner.events:
            data = event.get("event_data", {})
            where = "%s: %s" % (data.get("host"), data.get("task"))
            if event["event"] == "runner_on_ok" and data.get("res", {}).get("changed"):
                changed.append(where)
            elif event["event"] == "runner_on_failed" and not data.get("ignore_errors"):
                failed.append("%s (%s)" % (where, data.get("res", {}).get("msg")))
            elif event["event"] == "runner_on_unreachable":
                failed.append("%s (unreachable)" % where)
        print("check mode: status %s, rc %s, %d changed, %d failed" % (runner.status, runner.rc, len(changed), len(failed)))
        for line in changed:
            print("changed: " + line)
        for line in failed:
            print("failed: " + line)
        if changed or failed or runner.rc != 0:
            sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
