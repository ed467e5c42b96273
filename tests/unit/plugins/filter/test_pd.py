# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the PD topology filters (plugins/filter/pd.py): addresses, GPUs, workers, router URLs."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import pd


def workers(hostvars, mode, ranks="serving"):
    return pd.pd_workers(list(hostvars), hostvars, mode, ranks)


# --------------------------------------------------------------------------- addresses

@pytest.mark.parametrize("hostvars_one, expected", [
    ({"sglang_pd_service_address": "10.0.0.4", "ansible_host": "1.2.3.4"}, "10.0.0.4"),
    ({"sglang_pd_addresses": ["192.168.1.4/24", "10.0.3.7/16"], "sglang_pd_cluster_cidr": "10.0.0.0/16"}, "10.0.3.7"),
    ({"sglang_pd_addresses": ["10.0.3.7", "10.0.3.8"]}, "10.0.3.7"),
    ({"sglang_pd_addresses": {"eth0": ["172.16.0.5/16"], "ib0": ["10.9.0.5/16"]},
      "sglang_pd_service_interface": "ib0"}, "10.9.0.5"),
    ({"sglang_pd_addresses": {"eth0": ["172.16.0.5/16"], "ib0": ["10.9.0.5/16"]},
      "sglang_pd_cluster_cidr": "172.16.0.0/12"}, "172.16.0.5"),
    ({"ansible_host": "node-a.example"}, "node-a.example"),
    ({}, "node-a"),
])
def test_service_address_comes_from_inventory(hostvars_one, expected):
    assert pd.service_address(hostvars_one, "node-a") == expected


@pytest.mark.parametrize("hostvars_one, problem", [
    ({"sglang_pd_addresses": ["192.168.1.4"], "sglang_pd_cluster_cidr": "10.0.0.0/16"}, "no address inside 10.0.0.0/16"),
    ({"sglang_pd_addresses": {"eth0": ["10.0.0.1"]}, "sglang_pd_service_interface": "ib0"}, "no address in sglang_pd_addresses[ib0]"),
    ({"sglang_pd_addresses": ["10.0.0.1"], "sglang_pd_cluster_cidr": "10.0.0/33"}, "is not a network"),
])
def test_service_address_refuses_what_it_cannot_resolve(hostvars_one, problem):
    with pytest.raises(AnsibleFilterError, match="node-a: .*" + problem.replace("[", r"\[").replace("]", r"\]")):
        pd.service_address(hostvars_one, "node-a")


def test_service_address_never_reads_facts():
    facts_only = {"ansible_facts": {"default_ipv4": {"address": "10.0.0.99"}}, "ansible_default_ipv4": {"address": "10.0.0.99"}}
    assert pd.service_address(facts_only, "node-a") == "node-a"


# --------------------------------------------------------------------------- GPUs

@pytest.mark.parametrize("value, expected", [
    (None, None), ("", None), ([], None),
    ("0,1,2,3", [0, 1, 2, 3]), ("4-7", [4, 5, 6, 7]), ("0, 2", [0, 2]),
    ([0, 1], [0, 1]), (["4", "5"], [4, 5]),
])
def test_parse_gpus(value, expected):
    assert pd.parse_gpus(value) == expected


@pytest.mark.parametrize("value", ["0;1", "gpu0", [0, "x"], True, 4, {"0": 1}, [True]])
def test_parse_gpus_refuses(value):
    with pytest.raises(ValueError):
        pd.parse_gpus(value)


# --------------------------------------------------------------------------- workers

def test_one_worker_per_host_on_production_ports():
    hostvars = {"p0": {"sglang_pd_service_address": "10.0.0.1"}, "p1": {"sglang_pd_service_address": "10.0.0.2"}}
    found = workers(hostvars, "prefill")
    assert [(w["host"], w["name"], w["port"], w["bootstrap_port"], w["url"]) for w in found] == [
        ("p0", "sglang-prefill", 30100, 8998, "http://10.0.0.1:30100"),
        ("p1", "sglang-prefill", 30100, 8998, "http://10.0.0.2:30100"),
    ]
    decode = workers({"d0": {"sglang_pd_service_address": "10.0.0.3"}}, "decode")
    assert decode[0]["port"] == 30200 and decode[0]["bootstrap_port"] is None


def test_several_workers_on_one_host_count_up():
    hostvars = {"p0": {"sglang_pd_service_address": "10.0.0.1",
                       "sglang_pd_prefill_workers": [{"gpus": "0-3"}, {"gpus": [4, 5, 6, 7], "name": "pf-b"},
                                                     {"port": 31000, "bootstrap_port": 9100}]}}
    found = workers(hostvars, "prefill")
    assert [(w["name"], w["port"], w["bootstrap_port"], w["gpus"]) for w in found] == [
        ("sglang-prefill", 30100, 8998, [0, 1, 2, 3]),
        ("pf-b", 30101, 8999, [4, 5, 6, 7]),
        ("sglang-prefill-2", 31000, 9100, None),
    ]


def test_ipv6_address_is_bracketed_in_urls():
    found = workers({"d0": {"sglang_pd_service_address": "fd00::3"}}, "decode")
    assert found[0]["url"] == "http://[fd00::3]:30200"


def test_multi_node_worker_from_worker_group():
    hostvars = {
        "p0": {"sglang_pd_service_address": "10.0.0.1", "sglang_pd_worker_group": "big"},
        "p1": {"sglang_pd_service_address": "10.0.0.2", "sglang_pd_worker_group": "big"},
        "p2": {"sglang_pd_service_address": "10.0.0.3"},
    }
    every = workers(hostvars, "prefill", "all")
    assert [(w["host"], w["nnodes"], w["node_rank"], w["dist_init_addr"], w["serves_http"]) for w in every] == [
        ("p0", 2, 0, "10.0.0.1:20000", True),
        ("p1", 2, 1, "10.0.0.1:20000", False),
        ("p2", 1, 0, None, True),
    ]
    assert [w["host"] for w in workers(hostvars, "prefill")] == ["p0", "p2"]


def test_pd_workers_refuses_unknown_mode_and_ranks():
    with pytest.raises(AnsibleFilterError):
        pd.pd_workers([], {}, "router")
    with pytest.raises(AnsibleFilterError):
        pd.pd_workers([], {}, "decode", "some")


def test_router_port_falls_back_to_inventory_then_30000():
    assert pd.router_port({"sglang_router_port": 8000}) == 8000
    assert pd.router_port({}, {"sglang_pd_router_port": "31000"}) == 31000
    assert pd.router_port({}) == 30000


@pytest.mark.parametrize("path, volumes, expected", [
    ("/models/glm", ["/mnt/nvme/models:/models:ro"], "/mnt/nvme/models/glm"),
    ("/models", ["/mnt/nvme/models:/models"], "/mnt/nvme/models"),
    ("/models/glm/", ["/data:/", "/mnt/m:/models:ro"], "/mnt/m/glm"),
    ("/models/glm", ["/mnt/m:/mod:ro"], None),
    ("/models/glm", ["hfcache:/models"], None),
    ("/models/glm", [], None),
    (None, ["/a:/b"], None),
])
def test_volume_host_path(path, volumes, expected):
    assert pd.volume_host_path(path, volumes) == expected


def test_volumes_holding_keeps_only_the_model_mount():
    volumes = ["/mnt/nvme/models:/models:ro", "/mnt/nvme/cache:/root/.cache", "hf:/hf"]
    assert pd.volumes_holding(volumes, "/models/glm") == ["/mnt/nvme/models:/models:ro"]
    assert pd.volumes_holding(volumes, "/srv/glm") == [] and pd.volumes_holding(volumes, None) == []


def test_router_urls_come_from_the_inventory_and_the_role_defaults():
    one = {"sglang_pd_service_address": "10.0.0.2"}
    defaults = {"sglang_router_prometheus_port": 29000}
    assert pd.router_url(one, "r0") == "http://10.0.0.2:30000"
    assert pd.router_metrics_url(one, "r0", defaults) == "http://10.0.0.2:29000"
    assert pd.router_metrics_url(dict(one, sglang_router_prometheus_host="0.0.0.0"), "r0", defaults) == "http://10.0.0.2:29000"
    assert pd.router_metrics_url(dict(one, sglang_router_prometheus_host="fd00::2", sglang_router_prometheus_port=9100),
                                 "r0", defaults) == "http://[fd00::2]:9100"
    assert pd.router_metrics_url(dict(one, sglang_router_prometheus_port=None), "r0", defaults) == ""


def test_worker_changes_use_the_first_admin_control_plane_key_else_the_api_key():
    assert pd.router_admin_key({}) == ""
    assert pd.router_admin_key({"sglang_router_api_key": "data"}) == "data"
    keys = [{"id": "read", "name": "Reader", "role": "user", "key": "user-key"},
            {"id": "ops", "name": "Ops", "role": "admin", "key": "admin-key"},
            {"id": "ci", "name": "CI", "role": "admin", "key": "second-admin-key"}]
    assert pd.router_admin_key({"sglang_router_api_key": "data", "sglang_router_control_plane_api_keys": keys}) == "admin-key"
    # Without an admin key (the preflight refuses that) the API key is all there is.
    assert pd.router_admin_key({"sglang_router_api_key": "data", "sglang_router_control_plane_api_keys": keys[:1]}) == "data"
