# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet as it runs against the fleet as declared: per node, per service, per router.

``plan | mindverse.sglang_pd.fleet_status(live, routers_live)`` takes

- ``plan``: what the inventory declares, ``{services: [{host, name, mode, port, url, image,
  argv}], routers: {router host: {url, prefill: [worker urls], decode: [worker urls]}}}``;
- ``live``: what each node shows, ``{host: {reachable, gpus, nics, free_space, services: [...]}}`` where a
  service is a ``pd_live_services`` item (read from Docker) with ``unit_state``, ``health``
  (true, false or null when not asked), ``started_at``, ``restart_count`` and ``args`` (the
  container's command, or null when not read), and ``free_space`` the places measured (the
  ``space`` entry points of the sglang_image and sglang_model roles: ``{place, path, free_bytes,
  warn_below_bytes, low, error}``);
- ``routers_live``: ``{router host: {prefill: [urls], decode: [urls]}}`` as each router's
  worker API lists them, null for a router that did not answer;

and returns ``{nodes, routers, drift, unhealthy, counts}``. A drift item is one difference
between declared and running, ``{kind, host, service, reason}``: ``missing_service``,
``extra_service``, ``wrong_image``, ``different_arguments``, ``router_membership``,
``unreachable``, ``low_free_space`` (a node's Docker data-root or model directory below its
threshold: the run that pulls or copies there next may be refused). ``fleet_status_summary`` gives the short table a run prints.
"""
from __future__ import annotations

import html
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.mindverse.sglang_pd.plugins.filter.layout import image_reference
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import pd_workers, router_port, router_url
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._free_space import is_low

DRIFT_KINDS = ("unreachable", "missing_service", "extra_service", "wrong_image", "different_arguments", "router_membership",
               "low_free_space")


def _drift(kind, host, service, reason):
    return {"kind": kind, "host": host, "service": service, "reason": reason}


def _argument_difference(planned, running):
    """The first place two command lines differ, as a sentence; None when they are equal."""
    if list(planned) == list(running):
        return None
    for index, (mine, theirs) in enumerate(zip(planned, running)):
        if mine != theirs:
            return "argument %d is %r, the inventory gives %r" % (index, theirs, mine)
    if len(running) > len(planned):
        return "it runs with extra arguments %s" % " ".join(running[len(planned):])
    return "it runs without %s" % " ".join(planned[len(running):])


def _service_status(host, planned, running):
    """One service's row and its drift items: planned, running or both."""
    drift = []
    name = (planned or running)["name"]
    if running is None:
        drift.append(_drift("missing_service", host, name, "%s: %s is declared but does not run" % (host, name)))
    elif planned is not None and running.get("state") != "running":
        drift.append(_drift("missing_service", host, name, "%s: %s is declared but its container is %s"
                            % (host, name, running.get("state") or "in no known state")))
    elif planned is None:
        drift.append(_drift("extra_service", host, name, "%s: %s runs but the inventory does not declare it" % (host, name)))
    else:
        if running.get("image") != planned.get("image"):
            drift.append(_drift("wrong_image", host, name, "%s: %s runs %s, the inventory pins %s"
                                % (host, name, running.get("image") or "no image", planned.get("image"))))
        if running.get("args") is not None and planned.get("argv") is not None:
            difference = _argument_difference(planned["argv"], running["args"])
            if difference:
                drift.append(_drift("different_arguments", host, name, "%s: %s: %s" % (host, name, difference)))
    row = dict(running or {}, name=name, mode=(planned or running).get("mode"), host=host, url=(running or planned).get("url"),
               planned_image=(planned or {}).get("image"), declared=planned is not None, running=running is not None,
               drift=[item["reason"] for item in drift])
    problems = []
    if running is not None:
        if running.get("state") != "running":
            problems.append("container %s" % (running.get("state") or "unknown"))
        if running.get("unit_state") not in (None, "active"):
            problems.append("unit %s" % running["unit_state"])
        if running.get("health") is False:
            problems.append("health check failed")
    row["problems"] = problems
    return row, drift


def _gib(count):
    return "%.1f GiB" % (int(count) / 1024 ** 3)


def _free_space(host, places):
    """A node's measured places and a low_free_space drift item for each below its threshold."""
    rows, drift = [], []
    for place in places or []:
        free, threshold = place.get("free_bytes"), place.get("warn_below_bytes")
        low = is_low(None if free is None else int(free), None if threshold is None else int(threshold))
        rows.append(dict(place, low=low))
        if low:
            drift.append(_drift("low_free_space", host, None, "%s: the %s %s has %s free, below %s (%d < %d bytes)"
                                % (host, place.get("place"), place.get("path"), _gib(free), _gib(threshold), int(free), int(threshold))))
    return rows, drift


def _node_status(host, planned, live_node):
    live_node = live_node or {}
    reachable = live_node.get("reachable", False)
    node = {"host": host, "reachable": reachable, "gpus": live_node.get("gpus"), "nics": list(live_node.get("nics") or []),
            "free_space": [], "services": []}
    if not reachable:
        node["services"] = [dict(service, host=host, declared=True, running=None, drift=[], problems=["node unreachable"])
                            for service in planned]
        return node, [_drift("unreachable", host, None, "%s did not answer: its services are not known" % host)]
    node["free_space"], drift = _free_space(host, live_node.get("free_space"))
    running = dict((service["name"], service) for service in live_node.get("services") or [])
    declared = dict((service["name"], service) for service in planned)
    for name in sorted(set(running) | set(declared)):
        row, found = _service_status(host, declared.get(name), running.get(name))
        node["services"].append(row)
        drift.extend(found)
    return node, drift


def _router_status(host, planned, registered):
    router = {"host": host, "url": planned.get("url"), "answered": registered is not None, "planned": {}, "registered": {},
              "missing": [], "extra": []}
    drift = []
    for mode in ("prefill", "decode"):
        want = sorted(planned.get(mode) or [])
        router["planned"][mode] = want
        if registered is None:
            continue
        have = sorted((registered or {}).get(mode) or [])
        router["registered"][mode] = have
        for url in want:
            if url not in have:
                router["missing"].append(url)
                drift.append(_drift("router_membership", host, "router", "router on %s does not route to the %s worker %s"
                                    % (host, mode, url)))
        for url in have:
            if url not in want:
                router["extra"].append(url)
                drift.append(_drift("router_membership", host, "router", "router on %s routes to the %s worker %s, which the "
                                    "inventory does not declare" % (host, mode, url)))
    return router, drift


def fleet_plan(groups, hostvars, router_defaults=None):
    """What the inventory declares: ``{services, routers}`` as fleet_status takes it.

    Workers come from pd_workers (every node rank: each runs a container), with the command
    line the worker role would build (``sglang_worker_planned_argv`` on the host, set by its
    tasks/planned.yml; null when the host was not read). Each router serves every serving
    worker; its command line is not compared.
    """
    defaults = router_defaults or {}

    def image(host):
        one = hostvars[host]
        return image_reference(one.get("sglang_pd_image_repository"), one.get("sglang_pd_image_digest"))

    services, serving = [], {"prefill": [], "decode": []}
    for mode in ("prefill", "decode"):
        for worker in pd_workers(list(groups.get("sglang_" + mode) or []), hostvars, mode, ranks="all"):
            argv = (hostvars[worker["host"]].get("sglang_worker_planned_argv") or {}).get(worker["name"])
            services.append({"host": worker["host"], "name": worker["name"], "mode": mode, "port": worker["port"],
                             "url": worker["url"] if worker["serves_http"] else None, "image": image(worker["host"]), "argv": argv})
            if worker["serves_http"]:
                serving[mode].append(worker["url"])
    routers = {}
    for host in groups.get("sglang_router") or []:
        one = hostvars[host]
        services.append({"host": host, "name": one.get("sglang_router_name") or defaults.get("sglang_router_name", "sglang-router"),
                         "mode": "router", "port": router_port(one, one), "url": router_url(one, host), "image": image(host),
                         "argv": None})
        routers[host] = dict(serving, url=router_url(one, host))
    return {"services": services, "routers": routers}


def _unit_states(text):
    """``systemctl show --property=Id,ActiveState,NRestarts`` output: unit name -> {state, restarts}."""
    units = {}
    for block in str(text or "").strip().split("\n\n"):
        values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if values.get("Id"):
            restarts = values.get("NRestarts", "")
            units[values["Id"]] = {"state": values.get("ActiveState"), "restarts": int(restarts) if restarts.isdigit() else None}
    return units


def fleet_live_services(services, inspected=None, units_text="", health=None):
    """The services a node runs (pd_live_services), with what Docker, systemd and the health check add.

    ``inspected``: docker_container_info results (one per service, in order): the container's
    command (``args``) and start time; ``units_text``: systemctl show output; ``health``:
    sglang_health results of the running services.
    """
    inspected_by_name = dict((result["item"]["name"], result.get("container") or {}) for result in inspected or []
                             if isinstance(result, Mapping) and result.get("item"))
    health_by_name = dict((result["item"]["name"], result.get("status") == 200) for result in health or []
                          if isinstance(result, Mapping) and result.get("item") and not result.get("skipped"))
    units = _unit_states(units_text)
    found = []
    for service in services:
        container = inspected_by_name.get(service["name"]) or {}
        unit = units.get(service["name"] + ".service") or {}
        found.append(dict(service,
                          args=(container.get("Config") or {}).get("Cmd") if container else None,
                          started_at=(container.get("State") or {}).get("StartedAt"),
                          unit_state=unit.get("state"),
                          restart_count=unit.get("restarts"),
                          health=health_by_name.get(service["name"])))
    return found


def fleet_status(plan, live, routers_live=None):
    """The fleet's status and drift (see the module docstring)."""
    if not isinstance(plan, Mapping) or not isinstance(live, Mapping):
        raise AnsibleFilterError("fleet_status takes the plan {services, routers} and the live nodes {host: {...}} [SGLPD-DEF-001]")
    planned_by_host = {}
    for service in plan.get("services") or []:
        planned_by_host.setdefault(service["host"], []).append(service)
    nodes, drift = [], []
    for host in sorted(set(planned_by_host) | set(live)):
        node, found = _node_status(host, planned_by_host.get(host, []), live.get(host) or {"reachable": False})
        nodes.append(node)
        drift.extend(found)
    routers = []
    for host, planned in sorted((plan.get("routers") or {}).items()):
        router, found = _router_status(host, planned, (routers_live or {}).get(host))
        routers.append(router)
        drift.extend(found)
        if router["answered"] is False and live.get(host, {}).get("reachable"):
            drift.append(_drift("router_membership", host, "router", "router on %s did not list its workers" % host))
    unhealthy = [{"host": node["host"], "service": row["name"], "reason": ", ".join(row["problems"])}
                 for node in nodes for row in node["services"] if row["problems"]]
    counts = dict((kind, len([d for d in drift if d["kind"] == kind])) for kind in DRIFT_KINDS)
    counts.update(nodes=len(nodes), services=sum(len(n["services"]) for n in nodes), drift=len(drift), unhealthy=len(unhealthy))
    return {"nodes": nodes, "routers": routers, "drift": drift, "unhealthy": unhealthy, "counts": counts}


def fleet_status_summary(status):
    """The short table a run prints: one line per service, then the drift items."""
    lines = ["%-16s %-24s %-8s %-9s %-7s %s" % ("HOST", "SERVICE", "MODE", "STATE", "HEALTH", "DRIFT")]
    for node in status["nodes"]:
        for row in node["services"]:
            health = {True: "ok", False: "FAIL", None: "-"}[row.get("health")]
            state = row.get("state") or ("unreachable" if not node["reachable"] else "absent")
            lines.append("%-16s %-24s %-8s %-9s %-7s %s"
                         % (node["host"], row["name"], row.get("mode") or "-", state, health, len(row["drift"]) or "-"))
    lines.append("%d nodes, %d services, %d drift items, %d unhealthy" % (
        status["counts"]["nodes"], status["counts"]["services"], status["counts"]["drift"], status["counts"]["unhealthy"]))
    lines.extend("drift %s: %s" % (item["kind"], item["reason"]) for item in status["drift"])
    return lines


_STYLE = """
body{font-family:sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse;font-size:.85em}th,td{border:1px solid #bbb;padding:.25em .5em;text-align:left}
th{background:#eee;cursor:pointer}tr.bad td{background:#fde0e0}
.ok{fill:#d9f2d9;stroke:#3a7d3a}.bad{fill:#f7c6c6;stroke:#b00}.off{fill:#eee;stroke:#999}
svg text{font-size:11px;font-family:sans-serif}line{stroke:#888}line.bad{stroke:#b00;stroke-dasharray:4 2}
"""

# Click a column header to sort the table by it (numbers as numbers); no network, no library.
_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th, column) {
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
    var up = th.dataset.order !== 'up'; th.dataset.order = up ? 'up' : 'down';
    rows.sort(function (a, b) {
      var x = a.cells[column].textContent, y = b.cells[column].textContent;
      var n = parseFloat(x) - parseFloat(y);
      return (isNaN(n) ? x.localeCompare(y) : n) * (up ? 1 : -1);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
"""


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def _short_image(reference):
    """An image reference with its digest cut to 12 hex digits, for a table cell (the JSON keeps it whole)."""
    reference = str(reference or "-")
    at = reference.find("sha256:")
    return reference if at < 0 or len(reference) <= at + 19 else reference[:at + 19] + "\u2026"


def _box(x, y, width, label, css, reason, attribute):
    title = "<title>%s</title>" % _e(reason) if reason else ""
    return ('<g %s><rect x="%d" y="%d" width="%d" height="24" rx="4" class="%s"/>%s'
            '<text x="%d" y="%d">%s</text></g>' % (attribute, x, y, width, css, title, x + 6, y + 16, _e(label)))


def _topology(status):
    """An SVG picture: routers -> workers -> nodes -> their GPUs and NICs; red with the reason on hover."""
    columns = (10, 230, 470, 660)
    rows, shapes, lines = {}, [], []
    workers = [(node, row) for node in status["nodes"] for row in node["services"] if row.get("mode") in ("prefill", "decode")]
    for index, router in enumerate(status["routers"]):
        reason = "; ".join("not routing to %s" % url for url in router["missing"])
        reason += "; ".join("routing to undeclared %s" % url for url in router["extra"])
        if not router["answered"]:
            reason = "did not list its workers"
        rows[("router", router["host"])] = y = 10 + index * 34
        shapes.append(_box(columns[0], y, 200, "router %s" % router["host"], "bad" if reason else "ok", reason,
                           'data-router="%s"' % _e(router["host"])))
    for index, (node, row) in enumerate(workers):
        reason = "; ".join(row["problems"] + row["drift"])
        rows[("worker", node["host"], row["name"])] = y = 10 + index * 34
        shapes.append(_box(columns[1], y, 220, "%s %s" % (row["mode"], row["name"]), "bad" if reason else "ok", reason,
                           'data-service="%s/%s"' % (_e(node["host"]), _e(row["name"]))))
    for index, node in enumerate(status["nodes"]):
        rows[("node", node["host"])] = y = 10 + index * 68
        reason = "; ".join("%s %s below its threshold" % (place.get("place"), place.get("path")) for place in node["free_space"]
                           if place["low"]) if node["reachable"] else "unreachable"
        shapes.append(_box(columns[2], y, 170, "node %s" % node["host"], "bad" if reason else "ok", reason,
                           'data-node="%s"' % _e(node["host"])))
        devices = "%s GPUs, %s NICs" % ("?" if node["gpus"] is None else node["gpus"], len(node["nics"]))
        shapes.append(_box(columns[3], y, 150, devices, "off" if not node["reachable"] else "ok", ", ".join(node["nics"]),
                           'data-devices="%s"' % _e(node["host"])))
        lines.append('<line x1="%d" y1="%d" x2="%d" y2="%d"/>' % (columns[2] + 170, y + 12, columns[3], y + 12))
    for node, row in workers:
        y = rows[("worker", node["host"], row["name"])] + 12
        lines.append('<line x1="%d" y1="%d" x2="%d" y2="%d"/>' % (columns[1] + 220, y, columns[2], rows[("node", node["host"])] + 12))
    for router in status["routers"]:
        y = rows[("router", router["host"])] + 12
        for node, row in workers:
            if row.get("url") in router["missing"]:
                css = ' class="bad"'
            elif any(row.get("url") in urls for urls in router["planned"].values()):
                css = ""
            else:
                continue
            lines.append('<line%s x1="%d" y1="%d" x2="%d" y2="%d"/>'
                         % (css, columns[0] + 200, y, columns[1], rows[("worker", node["host"], row["name"])] + 12))
    height = 20 + max([34 * len(workers), 34 * len(status["routers"]), 68 * len(status["nodes"])] or [0])
    return '<svg xmlns="http://www.w3.org/2000/svg" width="830" height="%d" id="topology">%s%s</svg>' % (
        height, "".join(lines), "".join(shapes))


def _table(headers, rows, table_id):
    head = "".join("<th>%s</th>" % _e(h) for h in headers)
    body = "".join('<tr class="%s"%s>%s</tr>' % ("bad" if bad else "", attribute, "".join("<td>%s</td>" % _e(c) for c in cells))
                   for cells, bad, attribute in rows)
    return '<table class="sortable" id="%s"><thead><tr>%s</tr></thead><tbody>%s</tbody></table>' % (table_id, head, body)


def fleet_status_html(status, title="SGLang PD fleet"):
    """One self-contained HTML page of the status: the topology picture and sortable tables."""
    counts = status["counts"]
    services = [([node["host"], row["name"], row.get("mode"), row.get("state") or "-", row.get("unit_state") or "-",
                  {True: "ok", False: "FAIL", None: "-"}[row.get("health")], _short_image(row.get("image")), row.get("started_at") or "-",
                  row.get("restart_count") if row.get("restart_count") is not None else "-", "; ".join(row["drift"]) or "-"],
                 bool(row["problems"] or row["drift"]), ' data-row="%s/%s"' % (_e(node["host"]), _e(row["name"])))
                for node in status["nodes"] for row in node["services"]]
    drift = [([item["kind"], item["host"], item["service"] or "-", item["reason"]], True,
              ' data-drift-kind="%s"' % _e(item["kind"])) for item in status["drift"]]
    routers = [([router["host"], router["url"], ", ".join(router["registered"].get("prefill", [])) or "-",
                 ", ".join(router["registered"].get("decode", [])) or "-", ", ".join(router["missing"] + router["extra"]) or "-"],
                bool(router["missing"] or router["extra"] or not router["answered"]), "") for router in status["routers"]]
    return "".join([
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>%s</title><style>%s</style></head><body>" % (_e(title), _STYLE),
        "<h1>%s</h1>" % _e(title),
        '<p id="counts">%d nodes, %d services, <span id="drift-count">%d</span> drift items, %d unhealthy</p>'
        % (counts["nodes"], counts["services"], counts["drift"], counts["unhealthy"]),
        "<h2>Topology</h2>", _topology(status),
        "<h2>Drift</h2>", _table(["kind", "host", "service", "reason"], drift, "drift"),
        "<h2>Services</h2>", _table(["host", "service", "mode", "container", "unit", "health", "image", "started",
                                     "restarts", "drift"], services, "services"),
        "<h2>Routers</h2>", _table(["host", "url", "prefill workers", "decode workers", "differs from the plan"], routers, "routers"),
        "<script>%s</script></body></html>\n" % _SCRIPT,
    ])


class FilterModule:
    """Fleet status filters."""

    def filters(self):
        return {"fleet_plan": fleet_plan, "fleet_live_services": fleet_live_services, "fleet_status": fleet_status,
                "fleet_status_summary": fleet_status_summary, "fleet_status_html": fleet_status_html}
