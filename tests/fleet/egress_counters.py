"""Read the kernel's count of packets the fleet network sent off the machine, since a mark.

scripts/setup/egress_counters.sh installs the counting chain (SGLANG_PD_EGRESS). The counters are
never reset: `mark NAME` keeps their values at a scenario's start, and `read NAME` prints what
was counted since, {"outside the fleet": {"packets": N, "bytes": B}, "package mirror": {...}} as
JSON. So scenarios that run side by side each count every packet since their own start (the
others' too), and none erases what another counted.
Run as root on the machine that runs the fleet's Docker engine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

CHAIN = 'SGLANG_PD_EGRESS'
# Where the marks are kept: tests/output/egress/NAME.json of the checkout.
MARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'output', 'egress')
# iptables -L -v -x -n: "pkts bytes target prot opt in out source destination /* comment */"
_RULE = re.compile(r'^\s*(\d+)\s+(\d+)\s+RETURN\b.*/\* sglang-pd egress: (.+?) \*/')


def counters(listing):
    """Packets and bytes per rule kind ('outside the fleet', 'package mirror'), summed."""
    found = {}
    for line in listing.splitlines():
        match = _RULE.match(line)
        if match:
            kind = found.setdefault(match.group(3), {'packets': 0, 'bytes': 0})
            kind['packets'] += int(match.group(1))
            kind['bytes'] += int(match.group(2))
    if 'outside the fleet' not in found:
        raise SystemExit(f'chain {CHAIN} has no counting rule: run scripts/setup/egress_counters.sh')
    return found


def since(now, mark):
    """What was counted after `mark` (both as counters() returns them), per kind."""
    zero = {'packets': 0, 'bytes': 0}
    return {kind: {field: count[field] - mark.get(kind, zero)[field] for field in zero} for kind, count in now.items()}


def _current():
    listing = subprocess.run(['iptables', '-L', CHAIN, '-v', '-x', '-n'], check=True,
                             capture_output=True, text=True).stdout
    return counters(listing)


def main(argv):
    if len(argv) != 3 or argv[1] not in ('mark', 'read'):
        print(f'usage: {argv[0]} mark|read NAME', file=sys.stderr)
        return 2
    path = os.path.join(MARKS, argv[2] + '.json')
    if argv[1] == 'mark':
        os.makedirs(MARKS, exist_ok=True)
        with open(path, 'w', encoding='utf-8') as out:
            json.dump(_current(), out)
        return 0
    if not os.path.isfile(path):
        raise SystemExit(f'no egress mark {argv[2]}: the scenario marks the counters when it starts')
    with open(path, encoding='utf-8') as marked:
        print(json.dumps(since(_current(), json.load(marked))))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
