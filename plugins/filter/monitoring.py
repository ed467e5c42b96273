# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What Prometheus scrapes on a PD fleet, from the plan (the inventory).

The sglang_monitoring role writes these scrape configs into prometheus.yml and the
worker plan into its rules file; tests/fleet/monitoring.yml checks that every target
they name is up. Inventory variables only (``hostvars``), never gathered facts.

Jobs: ``sglang_router`` (each router's Prometheus port, sglang_router_prometheus_port),
``sglang_router_lb`` (the HAProxy exporter of each router balancer, sglang_router_lb_prometheus_port),
``sglang_worker`` (each serving worker started with SGLang's ``--enable-metrics``: its
``/metrics`` on its HTTP port, open without the API key), ``node`` (the node exporter of
every sglang_pd host) and ``amd_device_metrics`` (extra targets given by the operator).
"""
from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import (
    MODES,
    pd_workers,
    router_metrics_url,
    service_address,
)
from ansible_collections.mindverse.sglang_pd.plugins.filter.router_lb import router_lb_bind
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import WORKER_MODE_EXTRA_ARGS, worker_options

DEFAULT_NODE_EXPORTER_PORT = 9100
JOBS = ("sglang_router", "sglang_router_lb", "sglang_worker", "node", "amd_device_metrics")
WILDCARDS = (None, "", "0.0.0.0", "::")

# Every metric the rules and the dashboard read, and the source file that defines it in the
# pinned versions (sglang 0.5.14 wheel, sglang-router 0.3.2 wheel). tests/unit checks the
# rules and the dashboard use no other name, and that each name is in the cached wheels.
SGLANG_COLLECTOR = "sglang 0.5.14: sglang/srt/observability/metrics_collector.py"
ROUTER_METRICS = "sglang-router 0.3.2: smg::observability::metrics (src/observability/metrics.rs, in sglang_router_rs.abi3.so)"
METRIC_SOURCES = {
    "up": "Prometheus: the scrape's own health series",
    "sglang:num_running_reqs": SGLANG_COLLECTOR,
    "sglang:num_queue_reqs": SGLANG_COLLECTOR,
    "sglang:num_prefill_bootstrap_queue_reqs": SGLANG_COLLECTOR,
    "sglang:num_prefill_inflight_queue_reqs": SGLANG_COLLECTOR,
    "sglang:num_decode_prealloc_queue_reqs": SGLANG_COLLECTOR,
    "sglang:num_decode_transfer_queue_reqs": SGLANG_COLLECTOR,
    "sglang:num_bootstrap_failed_reqs_total": SGLANG_COLLECTOR,
    "sglang:num_transfer_failed_reqs_total": SGLANG_COLLECTOR,
    "sglang:kv_transfer_latency_ms": SGLANG_COLLECTOR,
    "sglang:token_usage": SGLANG_COLLECTOR,
    "sglang:gen_throughput": SGLANG_COLLECTOR,
    "sglang:time_to_first_token_seconds": SGLANG_COLLECTOR,
    "sglang:inter_token_latency_seconds": SGLANG_COLLECTOR,
    "sglang:num_requests_total": SGLANG_COLLECTOR,
    "smg_worker_health": ROUTER_METRICS,
    "smg_worker_cb_state": ROUTER_METRICS,
    "smg_http_requests_total": ROUTER_METRICS,
    "smg_http_responses_total": ROUTER_METRICS,
    "smg_http_request_duration_seconds": ROUTER_METRICS,
    "node_cpu_seconds_total": "prometheus-node-exporter 1.5: collector/cpu_common.go",
    "node_memory_MemAvailable_bytes": "prometheus-node-exporter 1.5: collector/meminfo.go (from /proc/meminfo)",
    "node_memory_MemTotal_bytes": "prometheus-node-exporter 1.5: collector/meminfo.go (from /proc/meminfo)",
}


def _target(address, port):
    return f"[{address}]:{int(port)}" if ":" in str(address) else f"{address}:{int(port)}"


def _hosts(groups, name):
    return list((groups or {}).get(name) or [])


def metrics_enabled(worker, hostvars_one):
    """True when the worker is started with ``--enable-metrics`` (its options, or its extra arguments)."""
    options = worker_options(worker, hostvars_one)[0]
    if options.get("enable_metrics") is True:
        return True
    extra = list(hostvars_one.get("sglang_worker_extra_args") or []) + list(hostvars_one.get(WORKER_MODE_EXTRA_ARGS[worker["mode"]]) or [])
    return "--enable-metrics" in [str(arg) for arg in extra]


def pd_worker_plan(groups, hostvars):
    """Every serving worker of the plan: ``{host, name, worker_type, worker, target, metrics}``.

    ``worker`` is the URL the router knows it by (the ``worker`` label of the router's
    ``smg_worker_health``); ``metrics`` says whether it serves ``/metrics``.
    """
    plan = []
    for mode in MODES:
        for worker in pd_workers(_hosts(groups, f"sglang_{mode}"), hostvars, mode):
            plan.append({
                "host": worker["host"],
                "name": worker["name"],
                "worker_type": mode,
                "worker": worker["url"],
                "target": _target(worker["address"], worker["port"]),
                "metrics": metrics_enabled(worker, hostvars[worker["host"]]),
            })
    return plan


def node_exporter_address(hostvars_one, host, default_port=DEFAULT_NODE_EXPORTER_PORT):
    """``ADDRESS:PORT`` the node exporter of HOST listens on: its service address, never 0.0.0.0."""
    port = hostvars_one.get("sglang_monitoring_node_exporter_port", default_port)
    if port in (None, ""):
        port = default_port
    return _target(service_address(hostvars_one, host), port)


def _extra_targets(extra):
    """The static configs of ``sglang_monitoring_amd_exporter_targets`` (strings or ``{target, labels}``)."""
    configs = []
    for item in extra or []:
        if isinstance(item, str):
            target, labels = item, {}
        elif isinstance(item, Mapping) and item.get("target"):
            target, labels = str(item["target"]), dict(item.get("labels") or {})
        else:
            raise AnsibleFilterError(
                f"sglang_monitoring_amd_exporter_targets: {item!r} is neither 'ADDRESS:PORT' nor {{target: ADDRESS:PORT, labels: {{...}}}} [SGLPD-MON-001]")
        if ":" not in target or not target.rsplit(":", maxsplit=1)[1].isdigit():
            raise AnsibleFilterError(f"sglang_monitoring_amd_exporter_targets: {target!r} is not ADDRESS:PORT [SGLPD-MON-001]")
        configs.append({"targets": [target], "labels": {str(k): str(v) for k, v in labels.items()}})
    return configs


def router_lb_metrics_target(hostvars_one, host, lb_defaults=None):
    """``ADDRESS:PORT`` of the HAProxy exporter of the router balancer on HOST, or "" when it exports none.

    Its port is sglang_router_lb_prometheus_port (LB_DEFAULTS: the sglang_router_lb role's defaults);
    its address sglang_router_lb_prometheus_host unless that is a wildcard, else the host's service address.
    """
    port = hostvars_one.get("sglang_router_lb_prometheus_port", (lb_defaults or {}).get("sglang_router_lb_prometheus_port"))
    if port in (None, "", 0):
        return ""
    address = hostvars_one.get("sglang_router_lb_prometheus_host")
    return router_lb_bind(hostvars_one, host, None if address in WILDCARDS else address, port)


def pd_scrape_configs(groups, hostvars, router_defaults=None, node_exporter_port=DEFAULT_NODE_EXPORTER_PORT,
                      amd_exporter_targets=None, scrape_interval=None, lb_defaults=None):
    """Prometheus ``scrape_configs`` for the fleet, one job per kind of target (``JOBS``).

    Each target carries a ``host`` label (its inventory name); a worker's also
    ``worker_type``, ``worker`` (its URL, as the router's metrics name it) and ``service``.
    A job without targets is left out (Prometheus accepts it, but it says nothing).
    LB_DEFAULTS are the sglang_router_lb role's defaults (the balancer's metrics port).
    """
    jobs = {job: [] for job in JOBS}
    for host in _hosts(groups, "sglang_router"):
        url = router_metrics_url(hostvars[host], host, router_defaults)
        if url:
            jobs["sglang_router"].append({"targets": [url.split("://", maxsplit=1)[1]], "labels": {"host": host}})
    for host in _hosts(groups, "sglang_router_lb"):
        target = router_lb_metrics_target(hostvars[host], host, lb_defaults)
        if target:
            jobs["sglang_router_lb"].append({"targets": [target], "labels": {"host": host}})
    for worker in pd_worker_plan(groups, hostvars):
        if worker["metrics"]:
            jobs["sglang_worker"].append({"targets": [worker["target"]], "labels": {
                "host": worker["host"], "service": worker["name"],
                "worker_type": worker["worker_type"], "worker": worker["worker"]}})
    for host in _hosts(groups, "sglang_pd"):
        jobs["node"].append({"targets": [node_exporter_address(hostvars[host], host, node_exporter_port)], "labels": {"host": host}})
    jobs["amd_device_metrics"] = _extra_targets(amd_exporter_targets)
    configs = []
    for job in JOBS:
        if jobs[job]:
            config = {"job_name": job, "metrics_path": "/metrics", "static_configs": jobs[job]}
            if scrape_interval:
                config["scrape_interval"] = str(scrape_interval)
            configs.append(config)
    return configs


def scrape_targets(scrape_configs):
    """``[{job, target, labels}]`` of every target in SCRAPE_CONFIGS (what /api/v1/targets must list)."""
    return [{"job": config["job_name"], "target": target, "labels": static.get("labels") or {}}
            for config in scrape_configs for static in config["static_configs"] for target in static["targets"]]


class FilterModule:
    """Monitoring filters."""

    def filters(self):
        return {
            "pd_scrape_configs": pd_scrape_configs,
            "pd_worker_plan": pd_worker_plan,
            "pd_scrape_targets": scrape_targets,
        }
