# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Print, as JSON, when the Docker engine saw each named node container stop and start.

Usage: reboot_order.py CONTAINER...

The engine's own record (its events), not the playbook's: a node that reboots ends its init (the
container dies) and its restart policy starts it again. Prints ``events`` (time, node, action in
order), ``stops`` (how often each node went down) and ``most_down_at_once`` (the most nodes that
were down together: 1 when they rebooted one at a time).
"""

import json
import sys
import time

import docker


def main(names):
    client = docker.from_env()
    ids = {client.containers.get(name).id: name for name in names}
    now = int(time.time())
    # The containers' ids, not their names: earlier containers of the same names are not counted.
    stream = client.events(since=now - 86400, until=now + 1, decode=True,
                           filters={"type": "container", "container": list(ids), "event": ["die", "start"]})
    events = sorted((event for event in stream if event.get("id") in ids), key=lambda event: event["timeNano"])
    down, most, record = set(), 0, []
    stops = {name: 0 for name in names}
    for event in events:
        name, action = ids[event["id"]], event["Action"]
        record.append({"time": event["timeNano"] / 1e9, "node": name, "action": action})
        if action == "die":
            down.add(name)
            stops[name] += 1
            most = max(most, len(down))
        else:
            down.discard(name)
    print(json.dumps({"events": record, "stops": stops, "most_down_at_once": most}))


if __name__ == "__main__":
    main(sys.argv[1:])
