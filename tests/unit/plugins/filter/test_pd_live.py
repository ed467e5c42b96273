"""pd_service_labels and pd_live_services: what runs, read back from Docker's labels."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import pd_workers, router_worker_spec
from ansible_collections.mindverse.sglang_pd.plugins.filter.pd_live import pd_live_services, pd_service_labels

HOSTVARS = {"p0": {"sglang_pd_service_address": "10.0.0.12"},
            "d0": {"sglang_pd_service_address": "fd00::14", "sglang_pd_decode_workers": [{}, {"port": 30210}]}}
IMAGE = "registry.example.com/mindverse/sglang@sha256:" + "a" * 64


def _container(labels, state="running", name="x"):
    return {"Id": "c" + name, "Names": ["/" + name], "Image": IMAGE, "State": state,
            "Labels": dict(label.split("=", 1) for label in labels)}


def test_labels_round_trip_through_docker_for_every_worker():
    for host, mode in (("p0", "prefill"), ("d0", "decode")):
        workers = pd_workers([host], HOSTVARS, mode)
        containers = [_container(pd_service_labels(w), name=w["name"]) for w in workers]
        containers.append({"Names": ["/unrelated"], "Image": "debian", "State": "running", "Labels": {"a": "b"}})
        live = pd_live_services(containers, HOSTVARS[host]["sglang_pd_service_address"])
        assert [(s["name"], s["mode"], s["url"], s["bootstrap_port"]) for s in live] == \
            sorted((w["name"], w["mode"], w["url"], w["bootstrap_port"] if mode == "prefill" else None) for w in workers)
        assert all(s["image"] == IMAGE and s["state"] == "running" for s in live)


def test_router_is_told_apart_and_filtered_by_mode():
    containers = [_container(pd_service_labels({"name": "sglang-router", "mode": "router", "port": 30000}), name="r"),
                  _container(pd_service_labels(pd_workers(["p0"], HOSTVARS, "prefill")[0]), "exited", name="p")]
    assert [s["name"] for s in pd_live_services(containers, "10.0.0.12", "router")] == ["sglang-router"]
    prefill = pd_live_services(containers, "10.0.0.12", "prefill")
    assert prefill[0]["state"] == "exited" and prefill[0]["url"] == "http://10.0.0.12:30100"


def test_bad_input_is_refused():
    with pytest.raises(AnsibleFilterError):
        pd_service_labels({"name": "x", "mode": "other", "port": 1})
    with pytest.raises(AnsibleFilterError):
        pd_service_labels({"name": "x"})
    with pytest.raises(AnsibleFilterError):
        pd_live_services("not a list", "10.0.0.1")


def test_router_worker_spec():
    prefill = pd_workers(["p0"], HOSTVARS, "prefill")[0]
    assert router_worker_spec(prefill) == {"url": "http://10.0.0.12:30100", "worker_type": "prefill", "bootstrap_port": 8998}
    assert router_worker_spec(pd_workers(["d0"], HOSTVARS, "decode")[1]) == {"url": "http://[fd00::14]:30210", "worker_type": "decode"}
    with pytest.raises(AnsibleFilterError):
        router_worker_spec({"url": "http://x"})
