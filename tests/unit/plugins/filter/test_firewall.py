# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of what the firewall admits (plugins/filter/firewall.py) and its preflight check."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import firewall
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import checks, model as preflight_model
from preflight_engine import resolver

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
with open(os.path.join(REPO, "roles", "sglang_router", "defaults", "main.yml"), encoding="utf-8") as _handle:
    ROUTER_DEFAULTS = yaml.safe_load(_handle)
with open(os.path.join(REPO, "roles", "sglang_router_lb", "defaults", "main.yml"), encoding="utf-8") as _handle:
    LB_DEFAULTS = yaml.safe_load(_handle)
NETWORKS = {"sglang_pd_cluster_cidr": "10.0.0.0/16", "sglang_pd_client_cidrs": ["10.1.0.0/16", "fd00::/64"]}


def fleet(**overrides):
    hostvars = {
        "p0": dict(NETWORKS, sglang_pd_service_address="10.0.0.1"),
        "d0": dict(NETWORKS, sglang_pd_service_address="10.0.0.2",
                   sglang_pd_decode_workers=[{"port": 30200, "gpus": "0-3"}, {"port": 30201, "gpus": "4-7"}]),
    }
    for host, values in overrides.items():
        hostvars[host].update(values)
    groups = {"sglang_prefill": ["p0"], "sglang_decode": ["d0"], "sglang_router": ["d0"]}
    return groups, hostvars


def test_a_prefill_host_guards_its_http_and_bootstrap_ports_for_the_cluster():
    groups, hostvars = fleet()
    rules = firewall.pd_firewall("p0", groups, hostvars)
    assert rules["cluster"] == {"v4": ["10.0.0.0/16"], "v6": [], "ports": [8998, 30100], "port_ranges": []}
    assert rules["clients"] == {"v4": ["10.1.0.0/16"], "v6": ["fd00::/64"], "ports": []}


@pytest.mark.parametrize("check, decode_ranges", [("skip", []), ("required", ["18515-18522"]), ("report", ["18515-18522"])])
def test_decode_hosts_admit_the_fabric_checks_servers_only_when_it_runs(check, decode_ranges):
    """playbooks/fabric_check.yml: ib_write_bw servers on the decode hosts, one port per test (here 1 x 1 x 8)."""
    groups, hostvars = fleet(p0={"sglang_pd_fabric_check": check}, d0={"sglang_pd_fabric_check": check})
    assert firewall.pd_firewall("d0", groups, hostvars, ROUTER_DEFAULTS)["cluster"]["port_ranges"] == decode_ranges
    assert firewall.pd_firewall("p0", groups, hostvars)["cluster"]["port_ranges"] == []


def test_the_router_host_admits_clients_to_the_router_port_only():
    groups, hostvars = fleet(d0={"sglang_router_prometheus_port": 29100})
    rules = firewall.pd_firewall("d0", groups, hostvars, ROUTER_DEFAULTS)
    assert rules["cluster"]["ports"] == [29100, 30200, 30201]
    assert rules["clients"]["ports"] == [30000]
    # Without a port of its own the router's metrics listen on the sglang_router role's default.
    groups, hostvars = fleet()
    assert firewall.pd_firewall("d0", groups, hostvars, ROUTER_DEFAULTS)["cluster"]["ports"] == [
        ROUTER_DEFAULTS["sglang_router_prometheus_port"], 30200, 30201]


def test_a_multi_node_worker_guards_its_dist_init_port_on_rank_0():
    groups, hostvars = fleet(p0={"sglang_pd_worker_group": "big"})
    hostvars["p1"] = dict(NETWORKS, sglang_pd_service_address="10.0.0.3", sglang_pd_worker_group="big")
    groups["sglang_prefill"] = ["p0", "p1"]
    assert 20000 in firewall.pd_firewall("p0", groups, hostvars)["cluster"]["ports"]
    assert firewall.pd_firewall("p1", groups, hostvars)["cluster"]["ports"] == []


@pytest.mark.parametrize("overrides, message", [
    ({"sglang_pd_client_cidrs": []}, "sglang_pd_client_cidrs is empty"),
    ({"sglang_pd_cluster_cidr": "10.0.0/40"}, "is not a network"),
    ({"ansible_port": 30000}, "port 30000 is both a service port and SSH's"),
])
def test_what_the_firewall_refuses(overrides, message):
    groups, hostvars = fleet(d0=overrides)
    with pytest.raises(AnsibleFilterError, match=message):
        firewall.pd_firewall("d0", groups, hostvars)


def test_the_preflight_wants_the_networks_unless_the_firewall_is_off():
    groups, hostvars = fleet(d0={"sglang_pd_client_cidrs": None})
    model = preflight_model.pd_model(groups, hostvars, resolver({}))
    problems = checks.pd_check_firewall(model, groups, hostvars)
    assert len(problems) == 1 and problems[0].startswith("d0: sglang_pd_client_cidrs = null: the firewall admits")
    hostvars["d0"]["sglang_firewall_enabled"] = False
    assert checks.pd_check_firewall(model, groups, hostvars) == []


def test_a_node_that_stages_model_weights_admits_its_seed_port_only_from_the_cluster():
    groups, hostvars = fleet(p0={"sglang_pd_model_stage": True}, d0={"sglang_pd_model_stage": True, "sglang_model_seed_port": 8731})
    assert firewall.pd_firewall("p0", groups, hostvars, ROUTER_DEFAULTS, {"sglang_model_seed_port": 8730})["cluster"]["ports"] == [
        8730, 8998, 30100]
    d0 = firewall.pd_firewall("d0", groups, hostvars, ROUTER_DEFAULTS, {"sglang_model_seed_port": 8730})
    assert 8731 in d0["cluster"]["ports"] and 8731 not in d0["clients"]["ports"]


def test_no_seed_port_without_staging():
    groups, hostvars = fleet(p0={"sglang_pd_model_stage": False})
    assert 8730 not in firewall.pd_firewall("p0", groups, hostvars, ROUTER_DEFAULTS, {"sglang_model_seed_port": 8730})["cluster"]["ports"]


def test_a_balancer_host_admits_clients_to_its_frontend_and_the_cluster_to_its_metrics():
    groups, hostvars = fleet()
    hostvars["lb0"] = dict(NETWORKS, sglang_pd_service_address="10.0.0.9")
    groups["sglang_router_lb"] = ["lb0"]
    rules = firewall.pd_firewall("lb0", groups, hostvars, ROUTER_DEFAULTS, None, LB_DEFAULTS)
    # Its frontend's port defaults to the routers' (clients keep theirs), its metrics to the role's default.
    assert rules["clients"]["ports"] == [30000]
    assert rules["cluster"]["ports"] == [LB_DEFAULTS["sglang_router_lb_prometheus_port"]]
    hostvars["lb0"].update(sglang_router_lb_port=31000, sglang_router_lb_prometheus_port=8406)
    rules = firewall.pd_firewall("lb0", groups, hostvars, ROUTER_DEFAULTS, None, LB_DEFAULTS)
    assert (rules["clients"]["ports"], rules["cluster"]["ports"]) == ([31000], [8406])
    # A host outside the group admits neither.
    assert 31000 not in firewall.pd_firewall("d0", groups, hostvars, ROUTER_DEFAULTS, None, LB_DEFAULTS)["clients"]["ports"]


with open(os.path.join(REPO, "roles", "sglang_image", "defaults", "main.yml"), encoding="utf-8") as _handle:
    IMAGE_DEFAULTS = yaml.safe_load(_handle)


def test_the_image_peer_registry_port_is_admitted_from_the_cluster_only_with_the_fan_out():
    groups, hostvars = fleet(d0={"sglang_image_peer_fanout": True, "sglang_image_peer_port": 5002})
    groups["sglang_pd"] = ["p0", "d0"]
    p0 = firewall.pd_firewall("p0", groups, hostvars, ROUTER_DEFAULTS, None, None, IMAGE_DEFAULTS)
    assert IMAGE_DEFAULTS["sglang_image_peer_fanout"] is False
    assert IMAGE_DEFAULTS["sglang_image_peer_port"] not in p0["cluster"]["ports"] + p0["clients"]["ports"]
    d0 = firewall.pd_firewall("d0", groups, hostvars, ROUTER_DEFAULTS, None, None, IMAGE_DEFAULTS)
    assert 5002 in d0["cluster"]["ports"] and 5002 not in d0["clients"]["ports"]
    hostvars["p0"]["sglang_image_peer_fanout"] = "true"
    p0 = firewall.pd_firewall("p0", groups, hostvars, ROUTER_DEFAULTS, None, None, IMAGE_DEFAULTS)
    assert IMAGE_DEFAULTS["sglang_image_peer_port"] in p0["cluster"]["ports"]
