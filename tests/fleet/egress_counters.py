"""Read or zero the kernel's count of packets the fleet network sent off the machine.

scripts/setup/egress_counters.sh installs the counting chain (SGLANG_PD_EGRESS). `read` prints
{"outside": {"packets": N, "bytes": B}, "package mirror": {...}} as JSON; `zero` resets both.
Run as root on the machine that runs the fleet's Docker engine.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

CHAIN = 'SGLANG_PD_EGRESS'
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


def main(argv):
    if argv[1:] == ['zero']:
        subprocess.run(['iptables', '-Z', CHAIN], check=True)
        return 0
    if argv[1:] == ['read']:
        listing = subprocess.run(['iptables', '-L', CHAIN, '-v', '-x', '-n'], check=True,
                                 capture_output=True, text=True).stdout
        print(json.dumps(counters(listing)))
        return 0
    print(f'usage: {argv[0]} read|zero', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
