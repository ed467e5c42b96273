# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests of the scrape targets and the worker plan (plugins/filter/monitoring.py), and of the
metric names the rules and the dashboard read: each must be defined by the pinned sources."""

from __future__ import annotations

import glob
import json
import os
import re
import zipfile

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter import monitoring

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ROLE = os.path.join(REPO, "roles", "sglang_monitoring")
with open(os.path.join(REPO, "roles", "sglang_router", "defaults", "main.yml"), encoding="utf-8") as _handle:
    ROUTER_DEFAULTS = yaml.safe_load(_handle)
METRICS = {"sglang_worker_options": {"enable_metrics": True}}


def fleet(**overrides):
    """The local fleet's shape: the router on a decode node, two decode workers on one node."""
    hostvars = {
        "p0": {"sglang_pd_service_address": "10.0.0.1"},
        "d0": {"sglang_pd_service_address": "10.0.0.2"},
        "d1": {"sglang_pd_service_address": "10.0.0.3",
               "sglang_pd_decode_workers": [{"port": 30200, "gpus": "0-3"}, {"port": 30201, "gpus": "4-7"}]},
    }
    for host, values in overrides.items():
        hostvars[host].update(values)
    groups = {"sglang_prefill": ["p0"], "sglang_decode": ["d0", "d1"], "sglang_router": ["d0"],
              "sglang_pd": ["p0", "d0", "d1"], "sglang_monitoring": ["p0"]}
    return groups, hostvars


def jobs(configs):
    return dict((config["job_name"], config) for config in configs)


def targets(config):
    return [(target, static["labels"]) for static in config["static_configs"] for target in static["targets"]]


def test_router_and_node_exporters_without_worker_metrics():
    groups, hostvars = fleet()
    configs = jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))
    assert sorted(configs) == ["node", "sglang_router"], "workers without --enable-metrics serve no /metrics: not scraped"
    assert targets(configs["sglang_router"]) == [("10.0.0.2:29000", {"host": "d0"})]
    assert targets(configs["node"]) == [("10.0.0.1:9100", {"host": "p0"}), ("10.0.0.2:9100", {"host": "d0"}),
                                        ("10.0.0.3:9100", {"host": "d1"})]
    assert all(config["metrics_path"] == "/metrics" for config in configs.values())


@pytest.mark.parametrize("where", ["sglang_worker_options", "mode_options", "worker_args", "extra_args", "mode_extra_args"])
def test_workers_with_metrics_enabled_are_scraped(where):
    values = {
        "sglang_worker_options": {"sglang_worker_options": {"enable_metrics": True}},
        "mode_options": {"sglang_worker_decode_options": {"enable_metrics": True},
                         "sglang_worker_prefill_options": {"enable_metrics": True}},
        "worker_args": {"sglang_pd_prefill_workers": [{"args": {"enable_metrics": True}}],
                        "sglang_pd_decode_workers": [{"args": {"enable_metrics": True}}]},
        "extra_args": {"sglang_worker_extra_args": ["--enable-metrics"]},
        "mode_extra_args": {"sglang_worker_prefill_extra_args": ["--enable-metrics"],
                            "sglang_worker_decode_extra_args": ["--enable-metrics"]},
    }[where]
    groups, hostvars = fleet(p0=values, d0=values)
    found = targets(jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))["sglang_worker"])
    assert found == [
        ("10.0.0.1:30100", {"host": "p0", "service": "sglang-prefill", "worker_type": "prefill", "worker": "http://10.0.0.1:30100"}),
        ("10.0.0.2:30200", {"host": "d0", "service": "sglang-decode", "worker_type": "decode", "worker": "http://10.0.0.2:30200"}),
    ], f"{where}: only p0 and d0 enable metrics, d1 does not"


def test_metrics_turned_off_by_a_later_source():
    groups, hostvars = fleet(p0=dict(METRICS, sglang_worker_prefill_options={"enable_metrics": False}))
    assert "sglang_worker" not in jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))


def test_every_worker_of_a_node_with_two_is_scraped():
    groups, hostvars = fleet(p0=METRICS, d0=METRICS, d1=METRICS)
    found = [target for target, _labels in targets(jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))["sglang_worker"])]
    assert found == ["10.0.0.1:30100", "10.0.0.2:30200", "10.0.0.3:30200", "10.0.0.3:30201"]


def test_only_the_serving_rank_of_a_multi_node_worker_is_scraped():
    group = {"sglang_pd_worker_group": "big"}
    groups, hostvars = fleet(p0=METRICS, d0=dict(METRICS, **group), d1=dict(METRICS, **group, sglang_pd_decode_workers=None))
    found = [target for target, _labels in targets(jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))["sglang_worker"])]
    assert found == ["10.0.0.1:30100", "10.0.0.2:30200"], "rank 1 (d1) serves no HTTP"


def test_router_metrics_port_and_host_follow_the_router_variables():
    groups, hostvars = fleet(d0={"sglang_router_prometheus_port": 29100, "sglang_router_prometheus_host": "10.9.0.2"})
    assert targets(jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))["sglang_router"]) == [("10.9.0.2:29100", {"host": "d0"})]
    groups, hostvars = fleet(d0={"sglang_router_prometheus_host": "0.0.0.0"})
    assert targets(jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))["sglang_router"]) == [("10.0.0.2:29000", {"host": "d0"})], \
        "a wildcard bind is scraped at the service address"
    groups, hostvars = fleet(d0={"sglang_router_prometheus_port": None})
    assert "sglang_router" not in jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))


def test_each_router_balancer_is_scraped_at_its_service_address():
    groups, hostvars = fleet(p0={"sglang_pd_service_address": "fd00::1"})
    groups["sglang_router_lb"] = ["p0", "d1"]
    hostvars["d1"].update(sglang_router_lb_prometheus_port=8406, sglang_router_lb_prometheus_host="0.0.0.0")
    configs = jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS, lb_defaults={"sglang_router_lb_prometheus_port": 8405}))
    assert targets(configs["sglang_router_lb"]) == [("[fd00::1]:8405", {"host": "p0"}), ("10.0.0.3:8406", {"host": "d1"})]
    assert "sglang_router_lb" not in jobs(monitoring.pd_scrape_configs(*fleet(), ROUTER_DEFAULTS)), "no balancer, no job"


def test_node_exporter_port_per_host_and_ipv6():
    groups, hostvars = fleet(p0={"sglang_monitoring_node_exporter_port": 9200}, d1={"sglang_pd_service_address": "fd00::3"})
    found = targets(jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS, node_exporter_port=9101))["node"])
    assert [target for target, _labels in found] == ["10.0.0.1:9200", "10.0.0.2:9101", "[fd00::3]:9101"]


def test_amd_exporter_targets_and_interval():
    groups, hostvars = fleet()
    configs = jobs(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS, amd_exporter_targets=[
        "10.0.0.1:5000", {"target": "10.0.0.2:5000", "labels": {"host": "d0"}}], scrape_interval="30s"))
    assert targets(configs["amd_device_metrics"]) == [("10.0.0.1:5000", {}), ("10.0.0.2:5000", {"host": "d0"})]
    assert {config["scrape_interval"] for config in configs.values()} == {"30s"}


@pytest.mark.parametrize("bad", ["10.0.0.1", {"labels": {}}, 5000, "host:port"])
def test_amd_exporter_target_errors_name_the_variable(bad):
    groups, hostvars = fleet()
    with pytest.raises(AnsibleFilterError, match="sglang_monitoring_amd_exporter_targets"):
        monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS, amd_exporter_targets=[bad])


def test_worker_plan_names_workers_as_the_router_does():
    groups, hostvars = fleet(p0=METRICS)
    plan = monitoring.pd_worker_plan(groups, hostvars)
    assert [(w["worker"], w["worker_type"], w["metrics"]) for w in plan] == [
        ("http://10.0.0.1:30100", "prefill", True), ("http://10.0.0.2:30200", "decode", False),
        ("http://10.0.0.3:30200", "decode", False), ("http://10.0.0.3:30201", "decode", False)]


def test_scrape_targets_flattens_every_job():
    groups, hostvars = fleet(p0=METRICS)
    found = monitoring.scrape_targets(monitoring.pd_scrape_configs(groups, hostvars, ROUTER_DEFAULTS))
    assert [(t["job"], t["target"]) for t in found] == [
        ("sglang_router", "10.0.0.2:29000"), ("sglang_worker", "10.0.0.1:30100"),
        ("node", "10.0.0.1:9100"), ("node", "10.0.0.2:9100"), ("node", "10.0.0.3:9100")]


# --- metric names --------------------------------------------------------------------------

NAME = re.compile(r"\b(sglang:[a-z_]+|smg_[a-z_]+|node_[A-Za-z_]+)")
SUFFIXES = ("_bucket", "_count", "_sum")


def base_name(name):
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name[:-len(suffix)] in monitoring.METRIC_SOURCES:
            return name[:-len(suffix)]
    return name


def used_names(text):
    return {base_name(name) for name in NAME.findall(text)}


def test_rules_and_dashboard_use_only_checked_metrics():
    with open(os.path.join(ROLE, "templates", "sglang_pd.rules.yml.j2"), encoding="utf-8") as handle:
        rules = handle.read()
    with open(os.path.join(ROLE, "files", "grafana", "sglang-pd.json"), encoding="utf-8") as handle:
        dashboard = json.load(handle)
    exprs = " ".join(target["expr"] for panel in dashboard["panels"] for target in panel["targets"])
    for where, text in (("templates/sglang_pd.rules.yml.j2", rules), ("files/grafana/sglang-pd.json", exprs)):
        unknown = used_names(text) - set(monitoring.METRIC_SOURCES)
        assert not unknown, f"roles/sglang_monitoring/{where} reads {sorted(unknown)}, not in monitoring.METRIC_SOURCES"
    assert used_names(rules) >= {"smg_worker_health", "sglang:time_to_first_token_seconds", "sglang:num_queue_reqs",
                                 "sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total"}


def test_dashboard_panels_use_the_provisioned_datasource():
    with open(os.path.join(ROLE, "files", "grafana", "sglang-pd.json"), encoding="utf-8") as handle:
        dashboard = json.load(handle)
    with open(os.path.join(ROLE, "templates", "grafana-datasource.yml.j2"), encoding="utf-8") as handle:
        uid = re.search(r"uid: (\S+)", handle.read()).group(1)
    assert dashboard["panels"], "the dashboard has no panel"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == uid, f"panel {panel['title']!r} names datasource {panel['datasource']}, not {uid}"
        assert panel["targets"], f"panel {panel['title']!r} has no query"


def _wheel(pattern):
    found = sorted(glob.glob(os.path.join(REPO, ".cache", "sources", pattern)))
    assert found, f"no {pattern} in .cache/sources: run scripts/setup (it caches the pinned wheels)"
    return found[-1]


def test_sglang_metric_names_are_in_sglang_0_5_14():
    with zipfile.ZipFile(_wheel("sglang-0.5.14-*.whl")) as wheel:
        text = wheel.read("sglang/srt/observability/metrics_collector.py").decode()
    for name, source in monitoring.METRIC_SOURCES.items():
        if name.startswith("sglang:"):
            assert source == monitoring.SGLANG_COLLECTOR
            assert f'name="{name}"' in text, f"{name} is not defined in sglang 0.5.14's metrics_collector.py"


def test_router_metric_names_are_in_sglang_router_0_3_2():
    with zipfile.ZipFile(_wheel("sglang_router-0.3.2-*.whl")) as wheel:
        binary = wheel.read("sglang_router/sglang_router_rs.abi3.so")
    for name, source in monitoring.METRIC_SOURCES.items():
        if name.startswith("smg_"):
            assert source == monitoring.ROUTER_METRICS
            assert name.encode() in binary, f"{name} is not in sglang-router 0.3.2's sglang_router_rs.abi3.so"
