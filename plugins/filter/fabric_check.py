# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric check (playbooks/fabric_check.yml): which NIC pairs to measure, and the matrix.

``prefill_hosts | mindverse.sglang_pd.fabric_check_plan(decode_hosts, hostvars, settings)``
lists one ib_write_bw test per distinct NIC pair of every prefill host x decode host (a host
never with itself): the prefill worker's GPU of tensor rank r and the decode worker's GPU of
rank r (the ranks that exchange KV, the GPUs listed in ``sglang_pd_<mode>_workers``, or all the
node's GPUs), each on its nearest NIC (``sglang_pd_fabric.pairs`` from
playbooks/tasks/fabric_facts.yml). A worker with fewer GPUs than its peer wraps around. With
eight GPUs each, that is GPU i's NIC on the prefill node with GPU i's NIC on the decode node.

Each test gets a round and a TCP port: within a round every NIC (host and device) is in one
test only, so concurrent tests never share a port or a link and each measures what the NIC
pair carries alone; the port is ``settings.port`` plus the test's index, unique in the run.
The expected bandwidth is ``settings.min_gbps`` when set, else ``settings.min_ratio`` of the
slower port's rate (rdma_facts ``rate_gbps``).

``plan | mindverse.sglang_pd.fabric_check_report(hostvars, hosts, settings)`` joins the
measurements the hosts recorded (``__sglang_pd_fabric_results``, see ``fabric_check_records``)
into the report: every pair with its result, the node matrix, and one sentence per failing
pair naming the hosts, NICs, GPUs, the measured and the expected Gb/s and the fix.
``report | mindverse.sglang_pd.fabric_check_markdown`` renders it for people.
``perftest_bw(stdout)`` reads one ib_write_bw client's result (``fabric_check_records`` calls it).
"""
from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import pd_workers, service_address
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._perftest import parse_bw

TIMED_OUT = 124  # coreutils timeout(1) exits 124 when it stopped the command


def perftest_bw(stdout, stderr=""):
    """The result of one ib_write_bw client (see plugins/module_utils/_perftest.py)."""
    return parse_bw(stdout, stderr)


def _port(device):
    ports = device.get("ports") or []
    for port in ports:
        if port.get("port") == 1:
            return port
    return ports[0] if ports else {}


def _device(fabric, nic):
    for device in (fabric.get("rdma") or {}).get("devices") or []:
        if device.get("name") == nic:
            return device
    return {}


def _gid_index(port, cluster_cidr):
    """Index of the port's first RoCE v2 GID with an IPv4 address (inside cluster_cidr when set), or None."""
    network = ipaddress.ip_network(str(cluster_cidr or "0.0.0.0/0"), strict=False)
    for gid in port.get("gids") or []:
        if gid.get("type") == "RoCE v2" and gid.get("ipv4") and ipaddress.ip_address(gid["ipv4"]) in network:
            return gid["index"]
    return None


def _ranks(workers, fabric):
    """The GPU lists of a host's workers (all the node's GPUs for a worker that names none)."""
    every = [pair["gpu"] for pair in fabric.get("pairs") or []]
    return [list(worker.get("gpus") or every) for worker in workers]


def _nic_side(host, fabric, gpu, cluster_cidr):
    """(nic, facts of its port 1, gid index or None, problem or None) for GPU gpu of host."""
    by_gpu = dict((pair["gpu"], pair["nic"]) for pair in fabric.get("pairs") or [])
    if gpu not in by_gpu:
        return None, {}, None, ("%s has no GPU %s among the GPUs sysfs shows (%s): fix the worker's gpus in "
                                "sglang_pd_<mode>_workers or the node's driver (amdgpu_facts)."
                                % (host, gpu, ", ".join(str(g) for g in sorted(by_gpu)) or "none"))
    nic = by_gpu[gpu]
    port = _port(_device(fabric, nic))
    problem = None
    gid = None
    if port.get("state") and port.get("state") != "ACTIVE":
        problem = ("%s NIC %s port %s is %s, not ACTIVE: bring the link up (ibstat %s) before measuring it."
                   % (host, nic, port.get("port"), port.get("state"), nic))
    elif port.get("link_layer") == "Ethernet":
        gid = _gid_index(port, cluster_cidr)
        if gid is None:
            problem = ("%s NIC %s is RoCE without a RoCE v2 GID%s: give its network device %s an address%s "
                       "(ib_write_bw -x needs the GID index)."
                       % (host, nic, " in %s" % cluster_cidr if cluster_cidr else " with an IPv4 address",
                          port.get("netdev") or "(none)", " in %s" % cluster_cidr if cluster_cidr else ""))
    return nic, port, gid, problem


def _argv(settings, nic, port_number, gid):
    argv = [str(settings.get("ib_write_bw") or "ib_write_bw"), "-d", nic, "-i", "1"]
    if gid is not None:
        argv += ["-x", str(gid)]
    argv += ["-p", str(port_number), "--report_gbits", "-F"]
    return argv + [str(arg) for arg in settings.get("args") or []]


def _schedule(tests, base_port):
    """Give each runnable test a round (no NIC twice in a round) and a port of its own."""
    rounds = []
    index = 0
    for test in tests:
        if test["problem"]:
            continue
        ends = {(test["prefill_host"], test["prefill_nic"]), (test["decode_host"], test["decode_nic"])}
        for number, busy in enumerate(rounds):
            if not busy & ends:
                break
        else:
            number = len(rounds)
            rounds.append(set())
        rounds[number] |= ends
        test["round"] = number
        test["port"] = base_port + index
        index += 1
    if base_port + index - 1 > 65535:
        raise AnsibleFilterError("sglang_pd_fabric_port %d leaves no room for %d tests below port 65535: choose a lower "
                                 "first port. [SGLPD-FAB-001]" % (base_port, index))


def _min_gbps(settings):
    """settings.min_gbps as a number, None when unset (a template may give "" or "None")."""
    value = settings.get("min_gbps")
    if value in (None, "", "None", "none"):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError("sglang_pd_fabric_min_gbps = %r: not a number of Gb/s; write for example 300. [SGLPD-FAB-001]" % (value,))


def _expected(settings, rates):
    known = [rate for rate in rates if rate]
    if _min_gbps(settings) is not None:
        return _min_gbps(settings), min(known) if known else None, None
    if not known:
        return None, None, ("the port rate is unknown on both NICs (rdma_facts rate_gbps): set "
                            "sglang_pd_fabric_min_gbps to the Gb/s each pair must reach.")
    rate = min(known)
    return round(float(settings.get("min_ratio", 0.8)) * rate, 2), rate, None


def describe(test):
    """``p0 mlx5_ib0 (GPU 0) -> d0 mlx5_ib0 (GPU 0)``: a test's hosts, NICs and GPUs."""
    def side(host, nic, gpus):
        return "%s %s (GPU %s)" % (host, nic or "?", ", ".join(str(g) for g in gpus))
    return "%s -> %s" % (side(test["prefill_host"], test["prefill_nic"], test["prefill_gpus"]),
                         side(test["decode_host"], test["decode_nic"], test["decode_gpus"]))


def _node_problem(prefill, decode, problem):
    return {"id": "%s->%s" % (prefill, decode), "prefill_host": prefill, "prefill_nic": None, "prefill_gpus": [],
            "decode_host": decode, "decode_nic": None, "decode_gpus": [], "server_address": None, "link_layer": None,
            "rate_gbps": None, "expected_gbps": None, "round": None, "port": None, "server_argv": [],
            "client_argv": [], "problem": problem}


def _node_facts(host, hostvars):
    fabric = hostvars[host].get("sglang_pd_fabric") if host in hostvars else None
    if not isinstance(fabric, Mapping):
        return None, ("%s has no fabric facts (sglang_pd_fabric): it failed or was unreachable while "
                      "playbooks/tasks/fabric_facts.yml read its sysfs. Fix that host and run again." % host)
    if not fabric.get("pairs"):
        return None, ("%s pairs no GPU with a NIC: sysfs shows %d GPUs and %d RDMA devices. Load the amdgpu and "
                      "RDMA drivers (playbooks/host_stack.yml) and run again."
                      % (host, len((fabric.get("amdgpu") or {}).get("gpus") or []),
                         len((fabric.get("rdma") or {}).get("devices") or [])))
    return fabric, None


def _node_pair_tests(prefill, decode, hostvars, settings):
    facts = {}
    for host in (prefill, decode):
        facts[host], problem = _node_facts(host, hostvars)
        if problem:
            return [_node_problem(prefill, decode, problem)]
    address = service_address(hostvars[decode], decode)
    prefill_ranks = _ranks(pd_workers([prefill], hostvars, "prefill", ranks="all"), facts[prefill])
    decode_ranks = _ranks(pd_workers([decode], hostvars, "decode", ranks="all"), facts[decode])
    tests = {}
    for mine in prefill_ranks:
        for theirs in decode_ranks:
            for rank in range(max(len(mine), len(theirs))):
                if not mine or not theirs:
                    continue
                ends = []
                for host, gpu in ((prefill, mine[rank % len(mine)]), (decode, theirs[rank % len(theirs)])):
                    ends.append((gpu,) + _nic_side(host, facts[host], gpu, hostvars[host].get("sglang_pd_cluster_cidr")))
                (p_gpu, p_nic, p_port, p_gid, p_problem), (d_gpu, d_nic, d_port, d_gid, d_problem) = ends
                key = (p_nic, d_nic) if p_nic and d_nic else ("gpu", p_gpu, d_gpu)
                if key in tests:
                    test = tests[key]
                    test["prefill_gpus"] = sorted(set(test["prefill_gpus"]) | {p_gpu})
                    test["decode_gpus"] = sorted(set(test["decode_gpus"]) | {d_gpu})
                    continue
                expected, rate, rate_problem = _expected(settings, [p_port.get("rate_gbps"), d_port.get("rate_gbps")])
                tests[key] = {
                    "id": "%s:%s->%s:%s" % (prefill, p_nic, decode, d_nic),
                    "prefill_host": prefill, "prefill_nic": p_nic, "prefill_gpus": [p_gpu],
                    "decode_host": decode, "decode_nic": d_nic, "decode_gpus": [d_gpu],
                    "server_address": address,
                    "link_layer": d_port.get("link_layer") or p_port.get("link_layer"),
                    "prefill_gid_index": p_gid, "decode_gid_index": d_gid,
                    "rate_gbps": rate, "expected_gbps": expected, "round": None, "port": None,
                    "server_argv": [], "client_argv": [],
                    "problem": p_problem or d_problem or rate_problem,
                }
    return list(tests.values())


def fabric_check_plan(prefill_hosts, decode_hosts, hostvars, settings=None):
    """One ib_write_bw test per distinct NIC pair of each prefill x decode host (see the module docstring)."""
    settings = dict(settings or {})
    base_port = int(settings.get("port") or 18515)
    tests = []
    for prefill in prefill_hosts or []:
        for decode in decode_hosts or []:
            if prefill != decode:
                tests.extend(_node_pair_tests(prefill, decode, hostvars, settings))
    _schedule(tests, base_port)
    for test in tests:
        if test["port"] is not None:
            test["server_argv"] = _argv(settings, test["decode_nic"], test["port"], test["decode_gid_index"])
            test["client_argv"] = _argv(settings, test["prefill_nic"], test["port"], test["prefill_gid_index"]) + [test["server_address"]]
    return tests


def fabric_check_commands(plan):
    """One line per test for people: the commands it runs, or why it is not measured."""
    lines = []
    for test in plan or []:
        if test["problem"]:
            lines.append("%s: not measured: %s" % (test["id"], test["problem"]))
        else:
            lines.append("%s: round %s, on %s: %s; on %s: %s" % (
                test["id"], test["round"], test["decode_host"], " ".join(test["server_argv"]), test["prefill_host"],
                " ".join(test["client_argv"])))
    return lines


def fabric_check_records(async_results, side):
    """Records of finished ib_write_bw runs (async_status results registered over a loop of started jobs)."""
    records = []
    for result in async_results or []:
        test = (result.get("item") or {}).get("item") or {}
        if not test.get("id"):
            continue
        records.append({"id": test["id"], "side": side, "rc": result.get("rc"),
                        "finished": bool(result.get("finished")),
                        "stdout": result.get("stdout") or "", "stderr": result.get("stderr") or ""})
    return records


def _tail(record, lines=3):
    if not record:
        return "no output"
    text = [line.strip() for line in (record.get("stderr", "") + "\n" + record.get("stdout", "")).splitlines() if line.strip()]
    return " | ".join(text[-lines:]) or "no output (rc %s)" % record.get("rc")


def _judge(test, client, server, listening, settings):
    """(status, measured Gb/s or None, message or None) of one test."""
    pair = describe(test)
    if test["problem"]:
        return "error", None, "%s: not measured: %s" % (pair, test["problem"])
    if client is None:
        if not listening:
            return "error", None, ("%s: the ib_write_bw server on %s (%s, TCP port %s) did not start listening: %s. "
                                   "Check that perftest is installed there and that %s opens (ibv_devinfo -d %s)."
                                   % (pair, test["decode_host"], test["decode_nic"], test["port"], _tail(server),
                                      test["decode_nic"], test["decode_nic"]))
        return "error", None, "%s: the ib_write_bw client on %s did not report: the run stopped before it." % (
            pair, test["prefill_host"])
    parsed = parse_bw(client.get("stdout"), client.get("stderr"))
    if not parsed["ok"]:
        why = parsed["error"]
        if client.get("rc") == TIMED_OUT:
            why = "no result within %s s (sglang_pd_fabric_timeout); %s" % (settings.get("timeout"), why)
        return "error", None, ("%s: ib_write_bw measured nothing (rc %s): %s. Server: %s. Check that %s reaches %s on "
                               "TCP port %s (firewall) and that the server answers, and that both NICs are ACTIVE "
                               "(ibstat %s on %s, ibstat %s on %s)."
                               % (pair, client.get("rc"), why, _tail(server), test["prefill_host"], test["server_address"],
                                  test["port"], test["prefill_nic"], test["prefill_host"], test["decode_nic"],
                                  test["decode_host"]))
    measured = parsed["average_gbps"]
    if test["expected_gbps"] is not None and measured < test["expected_gbps"]:
        of = ("sglang_pd_fabric_min_gbps" if _min_gbps(settings) is not None else
              "%d%% of the %s Gb/s port rate" % (round(float(settings.get("min_ratio", 0.8)) * 100), test["rate_gbps"]))
        return "slow", measured, ("%s: measured %.2f Gb/s, expected at least %.2f Gb/s (%s). Check both ports (ibstat %s on "
                                  "%s, ibstat %s on %s: state, rate, width; error counters with perfquery), the cables and "
                                  "switch path between them and each NIC's PCIe link (lspci -vv), then run "
                                  "playbooks/fabric_check.yml again."
                                  % (pair, measured, test["expected_gbps"], of, test["prefill_nic"], test["prefill_host"],
                                     test["decode_nic"], test["decode_host"]))
    return "pass", measured, None


def _records(hostvars, hosts):
    found = {}
    for host in hosts or []:
        one = hostvars[host] if host in hostvars else {}
        for record in one.get("__sglang_pd_fabric_results") or []:
            found[(record["id"], record["side"])] = record
        for test_id in one.get("__sglang_pd_fabric_listening") or []:
            found[(test_id, "listening")] = True
    return found


def fabric_check_report(plan, hostvars, hosts, settings=None):
    """The matrix report: every pair with its result, per node pair a summary, and the failures."""
    settings = dict(settings or {})
    records = _records(hostvars, hosts)
    pairs = []
    failures = []
    nodes = {}
    for test in plan or []:
        client = records.get((test["id"], "client"))
        server = records.get((test["id"], "server"))
        status, measured, message = _judge(test, client, server, records.get((test["id"], "listening"), False), settings)
        row = dict((key, test.get(key)) for key in (
            "id", "prefill_host", "prefill_nic", "prefill_gpus", "decode_host", "decode_nic", "decode_gpus",
            "server_address", "link_layer", "rate_gbps", "expected_gbps", "round", "port"))
        row.update({"measured_gbps": measured, "status": status, "message": message,
                    "client_output": (client or {}).get("stdout", ""), "server_output": (server or {}).get("stdout", "")})
        pairs.append(row)
        if message:
            failures.append(message)
        cell = nodes.setdefault(test["prefill_host"], {}).setdefault(
            test["decode_host"], {"pairs": 0, "passed": 0, "min_gbps": None, "status": "pass"})
        cell["pairs"] += 1
        cell["passed"] += 1 if status == "pass" else 0
        if measured is not None and (cell["min_gbps"] is None or measured < cell["min_gbps"]):
            cell["min_gbps"] = measured
        if status != "pass":
            cell["status"] = "fail"
    return {
        "settings": {"min_ratio": float(settings.get("min_ratio", 0.8)), "min_gbps": _min_gbps(settings),
                     "args": list(settings.get("args") or []), "first_port": settings.get("port")},
        "summary": {"pairs": len(pairs), "passed": len([p for p in pairs if p["status"] == "pass"]),
                    "slow": len([p for p in pairs if p["status"] == "slow"]),
                    "error": len([p for p in pairs if p["status"] == "error"])},
        "nodes": nodes,
        "pairs": pairs,
        "failures": failures,
    }


def _number(value):
    return "" if value is None else "%.2f" % value


def fabric_check_markdown(report):
    """The report as Markdown: the node matrix, every NIC pair, the failures."""
    if not isinstance(report, Mapping):
        raise AnsibleFilterError("fabric_check_markdown takes the report of fabric_check_report [SGLPD-DEF-001]")
    summary = report["summary"]
    settings = report["settings"]
    threshold = ("at least %s Gb/s per pair (sglang_pd_fabric_min_gbps)" % settings["min_gbps"] if settings.get("min_gbps")
                 else "at least %d%% of the slower port's rate (sglang_pd_fabric_min_ratio %s)"
                 % (round(settings["min_ratio"] * 100), settings["min_ratio"]))
    lines = ["# Fabric check (ib_write_bw)", "",
             "Written by playbooks/fabric_check.yml. Each prefill node writes to each decode node over the NIC pairs its "
             "GPUs use (RDMA write, one NIC pair at a time per NIC); a pair passes at %s." % threshold, "",
             "%d NIC pairs: %d pass, %d below the threshold, %d not measured."
             % (summary["pairs"], summary["passed"], summary["slow"], summary["error"]), "",
             "## Node pairs (prefill rows, decode columns)", ""]
    decodes = []
    for row in report["nodes"].values():
        decodes.extend(host for host in row if host not in decodes)
    lines.append("| prefill \\ decode | " + " | ".join(decodes) + " |")
    lines.append("| --- |" + " --- |" * len(decodes))
    for prefill, row in report["nodes"].items():
        cells = []
        for decode in decodes:
            cell = row.get(decode)
            if cell is None:
                cells.append("")
                continue
            cells.append("%s %d/%d%s" % ("pass" if cell["status"] == "pass" else "**FAIL**", cell["passed"], cell["pairs"],
                                         ", min %.2f Gb/s" % cell["min_gbps"] if cell["min_gbps"] is not None else ""))
        lines.append("| %s | %s |" % (prefill, " | ".join(cells)))
    lines += ["", "## NIC pairs", "",
              "| prefill | NIC | GPUs | decode | NIC | GPUs | Gb/s measured | Gb/s expected | port rate | result |",
              "| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | --- |"]
    for pair in report["pairs"]:
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            pair["prefill_host"], pair["prefill_nic"] or "", ",".join(str(g) for g in pair["prefill_gpus"] or []),
            pair["decode_host"], pair["decode_nic"] or "", ",".join(str(g) for g in pair["decode_gpus"] or []),
            _number(pair["measured_gbps"]), _number(pair["expected_gbps"]), _number(pair["rate_gbps"]),
            {"pass": "pass", "slow": "**SLOW**", "error": "**NOT MEASURED**"}[pair["status"]]))
    if report["failures"]:
        lines += ["", "## Failures", ""] + ["- " + message.replace("|", "\\|") for message in report["failures"]]
    return "\n".join(lines) + "\n"


class FilterModule:
    """Fabric check filters: the plan of ib_write_bw tests, their results and the matrix."""

    def filters(self):
        return {
            "fabric_check_plan": fabric_check_plan,
            "fabric_check_commands": fabric_check_commands,
            "fabric_check_records": fabric_check_records,
            "fabric_check_report": fabric_check_report,
            "fabric_check_markdown": fabric_check_markdown,
        }
