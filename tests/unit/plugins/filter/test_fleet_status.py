# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's status against its plan: each drift kind found, named and counted."""
from __future__ import annotations

import copy

from ansible_collections.mindverse.sglang_pd.plugins.filter import fleet_status as fs

IMAGE = "registry.example.com/mindverse/sglang@sha256:" + "5e" * 32
PREFILL = "http://10.0.0.10:30100"
DECODE = "http://10.0.0.11:30200"


def plan():
    return {
        "services": [
            {"host": "p0", "name": "sglang-prefill", "mode": "prefill", "port": 30100, "url": PREFILL, "image": IMAGE,
             "argv": ["python", "-m", "sglang.launch_server", "--disaggregation-mode", "prefill"]},
            {"host": "d0", "name": "sglang-decode", "mode": "decode", "port": 30200, "url": DECODE, "image": IMAGE,
             "argv": ["python", "-m", "sglang.launch_server", "--disaggregation-mode", "decode"]},
            {"host": "d0", "name": "sglang-router", "mode": "router", "port": 30000, "url": "http://10.0.0.11:30000",
             "image": IMAGE, "argv": None},
        ],
        "routers": {"d0": {"url": "http://10.0.0.11:30000", "prefill": [PREFILL], "decode": [DECODE]}},
    }


def running(service, **changes):
    item = {key: service[key] for key in ("name", "mode", "port", "url", "image")}
    item.update(state="running", unit_state="active", health=True, started_at="2026-12-02T05:00:00Z", restart_count=0,
                args=service["argv"])
    item.update(changes)
    return item


def live(the_plan):
    nodes = {}
    for service in the_plan["services"]:
        node = nodes.setdefault(service["host"], {"reachable": True, "gpus": 8, "nics": ["mlx5_ib%d" % i for i in range(8)],
                                                  "services": []})
        node["services"].append(running(service))
    return nodes


def routers_live():
    return {"d0": {"prefill": [PREFILL], "decode": [DECODE]}}


def test_a_fleet_as_declared_has_no_drift_and_every_service_is_healthy():
    status = fs.fleet_status(plan(), live(plan()), routers_live())
    assert status["drift"] == [] and status["unhealthy"] == []
    assert status["counts"]["nodes"] == 2 and status["counts"]["services"] == 3
    assert [s["name"] for s in status["nodes"][0]["services"]] == ["sglang-decode", "sglang-router"]


def test_a_worker_stopped_by_hand_is_missing_and_counted():
    nodes = live(plan())
    nodes["p0"]["services"] = []
    status = fs.fleet_status(plan(), nodes, routers_live())
    assert status["drift"] == [{"kind": "missing_service", "host": "p0", "service": "sglang-prefill",
                                "reason": "p0: sglang-prefill is declared but does not run"}]
    assert status["counts"]["missing_service"] == 1


def test_a_stopped_container_is_unhealthy_with_its_state():
    nodes = live(plan())
    nodes["d0"]["services"][0].update(state="exited", unit_state="failed", health=False)
    status = fs.fleet_status(plan(), nodes, routers_live())
    assert status["unhealthy"] == [{"host": "d0", "service": "sglang-decode", "reason": "container exited, unit failed, health check failed"}]
    assert [d["reason"] for d in status["drift"]] == ["d0: sglang-decode is declared but its container is exited"]


def test_a_retagged_image_and_changed_arguments_are_drift():
    nodes = live(plan())
    nodes["d0"]["services"][0].update(image="registry.example.com/mindverse/sglang:v2",
                                      args=["python", "-m", "sglang.launch_server", "--disaggregation-mode", "decode", "--debug"])
    drift = fs.fleet_status(plan(), nodes, routers_live())["drift"]
    assert [d["kind"] for d in drift] == ["wrong_image", "different_arguments"]
    assert drift[0]["reason"] == "d0: sglang-decode runs registry.example.com/mindverse/sglang:v2, the inventory pins " + IMAGE
    assert drift[1]["reason"] == "d0: sglang-decode: it runs with extra arguments --debug"


def test_an_extra_service_and_an_unreachable_node():
    nodes = live(plan())
    nodes["d0"]["services"].append({"name": "sglang-decode-9", "mode": "decode", "port": 30209, "image": IMAGE, "state": "running"})
    nodes["p0"] = {"reachable": False}
    status = fs.fleet_status(plan(), nodes, routers_live())
    kinds = sorted(d["kind"] for d in status["drift"])
    assert kinds == ["extra_service", "unreachable"]
    assert status["nodes"][1]["services"][0]["problems"] == ["node unreachable"]


def test_router_membership_against_the_plan_both_ways():
    registered = {"d0": {"prefill": [], "decode": [DECODE, "http://10.0.0.99:30200"]}}
    drift = fs.fleet_status(plan(), live(plan()), registered)["drift"]
    assert [d["reason"] for d in drift] == [
        "router on d0 does not route to the prefill worker " + PREFILL,
        "router on d0 routes to the decode worker http://10.0.0.99:30200, which the inventory does not declare"]


def test_the_summary_lists_each_service_and_each_drift_item():
    nodes = live(plan())
    nodes["p0"]["services"] = []
    lines = fs.fleet_status_summary(fs.fleet_status(plan(), nodes, routers_live()))
    assert lines[0].split() == ["HOST", "SERVICE", "MODE", "STATE", "HEALTH", "DRIFT"]
    assert lines[-2] == "2 nodes, 3 services, 1 drift items, 0 unhealthy"
    assert lines[-1] == "drift missing_service: p0: sglang-prefill is declared but does not run"
    assert copy.deepcopy(plan()) == plan()


def test_the_page_is_self_contained_and_marks_each_drift_in_red():
    nodes = live(plan())
    nodes["p0"]["services"] = []
    page = fs.fleet_status_html(fs.fleet_status(plan(), nodes, {"d0": {"prefill": [], "decode": [DECODE]}}))
    assert "http" not in page.replace(PREFILL, "").replace(DECODE, "").replace("http://10.0.0.11:30000", "").replace(
        "http://www.w3.org/2000/svg", "")
    assert '<span id="drift-count">2</span>' in page
    assert page.count('data-drift-kind="missing_service"') == 1 and page.count('data-drift-kind="router_membership"') == 1
    assert 'data-node="p0"' in page and 'data-node="d0"' in page and 'data-service="d0/sglang-decode"' in page
    assert '<g data-router="d0"><rect x="10" y="10" width="200" height="24" rx="4" class="bad"/><title>not routing to ' + PREFILL in page
    assert '<line class="bad"' in page
    assert "<td>registry.example.com/mindverse/sglang@sha256:5e5e5e5e5e5e\u2026</td>" in page and IMAGE not in page


def test_the_live_services_take_the_command_start_unit_and_health_of_each():
    services = [{"name": "sglang-decode", "mode": "decode", "port": 30200, "url": DECODE, "image": IMAGE, "state": "running"},
                {"name": "sglang-decode-1", "mode": "decode", "port": 30201, "url": None, "image": IMAGE, "state": "exited"}]
    inspected = [{"item": services[0], "container": {"Config": {"Cmd": ["python", "-m", "x"], "Env": ["A=1"]},
                                                     "State": {"StartedAt": "2026-12-02T05:00:00Z"}}},
                 {"item": services[1], "container": None}]
    units = "Id=sglang-decode.service\nActiveState=active\nNRestarts=2\n\nId=sglang-decode-1.service\nActiveState=failed\nNRestarts=\n"
    health = [{"item": services[0], "status": 200}]
    found = fs.fleet_live_services(services, inspected, units, health)
    assert {k: found[0][k] for k in ("args", "started_at", "unit_state", "restart_count", "health")} == {
        "args": ["python", "-m", "x"], "started_at": "2026-12-02T05:00:00Z", "unit_state": "active", "restart_count": 2, "health": True}
    assert {k: found[1][k] for k in ("args", "unit_state", "restart_count", "health")} == {
        "args": None, "unit_state": "failed", "restart_count": None, "health": None}
    assert "Env" not in str(found)


def test_the_plan_lists_every_worker_rank_and_each_router_with_the_serving_workers():
    hostvars = {
        "p0": {"sglang_pd_service_address": "10.0.0.10", "sglang_pd_image_repository": "r/s", "sglang_pd_image_digest": "sha256:1",
               "sglang_worker_planned_argv": {"sglang-prefill": ["python"]}},
        "d0": {"sglang_pd_service_address": "10.0.0.11", "sglang_pd_image_repository": "r/s", "sglang_pd_image_digest": "sha256:1"},
    }
    groups = {"sglang_prefill": ["p0"], "sglang_decode": ["d0"], "sglang_router": ["d0"]}
    the_plan = fs.fleet_plan(groups, hostvars, {"sglang_router_name": "sglang-router"})
    assert [(s["host"], s["name"], s["argv"], s["image"]) for s in the_plan["services"]] == [
        ("p0", "sglang-prefill", ["python"], "r/s@sha256:1"), ("d0", "sglang-decode", None, "r/s@sha256:1"),
        ("d0", "sglang-router", None, "r/s@sha256:1")]
    assert the_plan["routers"]["d0"]["prefill"] == [PREFILL] and the_plan["routers"]["d0"]["decode"] == [DECODE]


# Found by mutation testing (make mutation, docs/testing.md): what decides drift and health.

def test_a_node_with_no_live_record_is_unreachable_and_its_services_declared():
    nodes = live(plan())
    del nodes["p0"]
    status = fs.fleet_status(plan(), nodes, routers_live())
    p0 = [node for node in status["nodes"] if node["host"] == "p0"][0]
    assert p0["reachable"] is False
    assert [(row["name"], row["declared"], row["running"], row["problems"]) for row in p0["services"]] == [
        ("sglang-prefill", True, None, ["node unreachable"])]
    assert status["drift"] == [{"kind": "unreachable", "host": "p0", "service": None,
                                "reason": "p0 did not answer: its services are not known"}]


def test_a_live_record_without_reachable_counts_as_unreachable():
    nodes = live(plan())
    del nodes["p0"]["reachable"]
    assert [d["kind"] for d in fs.fleet_status(plan(), nodes, routers_live())["drift"]] == ["unreachable"]


def test_a_live_node_the_plan_does_not_name_is_reported():
    nodes = live(plan())
    nodes["x9"] = {"reachable": True, "services": [{"name": "sglang-decode", "mode": "decode", "image": IMAGE, "state": "running"}]}
    status = fs.fleet_status(plan(), nodes, routers_live())
    assert [node["host"] for node in status["nodes"]] == ["d0", "p0", "x9"]
    assert [(d["kind"], d["host"]) for d in status["drift"]] == [("extra_service", "x9")]


def test_the_rows_say_whether_a_service_is_declared_and_runs():
    nodes = live(plan())
    nodes["d0"]["services"].append({"name": "sglang-decode-9", "mode": "decode", "image": IMAGE, "state": "running"})
    rows = {row["name"]: row for node in fs.fleet_status(plan(), nodes, routers_live())["nodes"] for row in node["services"]}
    assert (rows["sglang-decode"]["declared"], rows["sglang-decode"]["running"]) == (True, True)
    assert (rows["sglang-decode-9"]["declared"], rows["sglang-decode-9"]["running"]) == (False, True)


def test_arguments_are_compared_only_when_both_sides_are_known():
    nodes = live(plan())
    nodes["d0"]["services"][0]["args"] = None  # docker inspect gave no command line
    assert fs.fleet_status(plan(), nodes, routers_live())["drift"] == []


def test_each_way_two_command_lines_differ_is_named():
    argv = ["python", "-m", "sglang.launch_server"]
    difference = fs._argument_difference  # pylint: disable=protected-access
    assert difference(argv, argv) is None
    assert difference(argv, ["python", "-m", "x"]) == "argument 2 is 'x', the inventory gives 'sglang.launch_server'"
    assert difference(argv, argv + ["--debug"]) == "it runs with extra arguments --debug"
    assert difference(argv + ["--a", "1"], argv) == "it runs without --a 1"


def test_a_router_that_did_not_answer_on_a_reachable_node_is_drift_and_the_routers_loop_goes_on():
    the_plan = plan()
    the_plan["routers"]["p0"] = {"url": "http://10.0.0.10:30000", "prefill": [PREFILL], "decode": [DECODE]}
    status = fs.fleet_status(the_plan, live(the_plan), {"p0": {"prefill": [], "decode": [DECODE]}})
    drift = status["drift"]
    # Both modes are planned for a router that did not answer, and nothing is taken as registered.
    assert [(r["host"], r["answered"], r["planned"], r["registered"]) for r in status["routers"]] == [
        ("d0", False, {"prefill": [PREFILL], "decode": [DECODE]}, {}),
        ("p0", True, {"prefill": [PREFILL], "decode": [DECODE]}, {"prefill": [], "decode": [DECODE]})]
    # d0's router did not answer (no record): named; p0's answered and misses its prefill worker: named too.
    assert [d["reason"] for d in drift] == [
        "router on d0 did not list its workers",
        "router on p0 does not route to the prefill worker " + PREFILL]


def _places(data_root_free, model_free):
    return [{"place": "data-root", "path": "/var/lib/docker", "free_bytes": data_root_free, "warn_below_bytes": 121474836480,
             "low": None, "error": None},
            {"place": "model directory", "path": "/models/glm", "free_bytes": model_free, "warn_below_bytes": 10737418240,
             "low": None, "error": None}]


def test_a_nearly_full_data_root_is_low_free_space_drift_on_its_node():
    nodes = live(plan())
    nodes["p0"]["free_space"] = _places(80 * 1024 ** 2, 500 * 1024 ** 3)
    nodes["d0"]["free_space"] = _places(500 * 1024 ** 3, 500 * 1024 ** 3)
    status = fs.fleet_status(plan(), nodes, routers_live())
    assert status["drift"] == [{"kind": "low_free_space", "host": "p0", "service": None,
                                "reason": "p0: the data-root /var/lib/docker has 0.1 GiB free, below 113.1 GiB "
                                          "(83886080 < 121474836480 bytes)"}]
    assert status["counts"]["low_free_space"] == 1 and status["unhealthy"] == []
    p0 = next(node for node in status["nodes"] if node["host"] == "p0")
    assert [(place["place"], place["free_bytes"], place["low"]) for place in p0["free_space"]] == [
        ("data-root", 80 * 1024 ** 2, True), ("model directory", 500 * 1024 ** 3, False)]
    assert "drift low_free_space: p0: the data-root /var/lib/docker has 0.1 GiB free" in "\n".join(fs.fleet_status_summary(status))
    page = fs.fleet_status_html(status)
    assert 'data-drift-kind="low_free_space"' in page
    assert '<g data-node="p0"><rect x="470" y="78" width="170" height="24" rx="4" class="bad"/>' in page
    assert '<g data-node="d0"><rect x="470" y="10" width="170" height="24" rx="4" class="ok"/>' in page


def test_a_model_directory_below_its_threshold_is_drift_and_an_unmeasured_place_is_not():
    nodes = live(plan())
    nodes["d0"]["free_space"] = _places(None, str(10737418240 - 1))  # Docker not answering; figures as set_fact leaves them
    drift = fs.fleet_status(plan(), nodes, routers_live())["drift"]
    assert [(d["kind"], d["host"]) for d in drift] == [("low_free_space", "d0")]
    assert "the model directory /models/glm has 10.0 GiB free, below 10.0 GiB (10737418239 < 10737418240 bytes)" in drift[0]["reason"]
