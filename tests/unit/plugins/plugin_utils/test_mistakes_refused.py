# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Realistic inventory mistakes that once reached the render, each refused with its cause and its fix.

Every case sets one variable on every host of a valid inventory (test_pd_checks.inventory) and
runs the preflight's checks; every near miss that Docker or SGLang takes must still pass.
"""

from __future__ import annotations

import pytest

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import container, router_rules
from test_pd_checks import all_problems, inventory, model_of  # same folder (pytest puts it on sys.path)

MOUNT = {"sglang_worker_volumes": ["/mnt/resource_nvme/models:/models:ro"]}


def problems_with(**values):
    groups, hostvars = inventory()
    for one in hostvars.values():
        one.update(values)
    model = model_of(groups, hostvars)
    return list(all_problems(groups, hostvars) + container.pd_check_container(model) + router_rules.pd_check_router_options(model))


@pytest.mark.parametrize("values, expected", [
    ({"sglang_pd_image_repository": "https://myacr.azurecr.io/sglang"}, ["sglang_pd_image_repository", "URL scheme"]),
    ({"sglang_pd_image_repository": "myacr.azurecr.io/Mindverse/SGLang"}, ["sglang_pd_image_repository", "lowercase"]),
    ({"sglang_pd_image_repository": "myacr.azurecr.io/sglang\n"}, ["sglang_pd_image_repository", "whitespace"]),
    ({"sglang_pd_image_repository": " myacr.azurecr.io/sglang"}, ["sglang_pd_image_repository", "whitespace"]),
    ({"sglang_pd_image_repository": "myacr.azurecr.io/sglang:latest"}, ["sglang_pd_image_repository", "a tag"]),
    ({"sglang_pd_model_path": "models/glm-5.2-fp8"}, ["sglang_pd_model_path", "relative", "absolute path"]),
    (dict(MOUNT, sglang_pd_model_path="/mnt/resource_nvme/models/glm-5.2-fp8"),
     ["sglang_pd_model_path", "the host's folder", "write /models/glm-5.2-fp8"]),
    ({"sglang_worker_rocm_env": {"HIP_FORCE_DEV_KERNARG": "1\n"}}, ["sglang_worker_rocm_env.HIP_FORCE_DEV_KERNARG", "control character"]),
    ({"sglang_router_env": {"RUST_LOG": "info\r"}}, ["sglang_router_env.RUST_LOG", "control character"]),
    ({"sglang_worker_extra_args": ["--base-gpu-id", "4"]}, ["--base-gpu-id is set by the collection", "gpus in sglang_pd_<mode>_workers"]),
    ({"sglang_router_extra_args": ["--policy", "round_robin"]}, ["--policy from sglang_router_policy", "write sglang_router_policy"]),
    ({"sglang_router_extra_args": ["--prefill", "http://10.0.0.9:30100", "8998"]}, ["its prefill workers", "sglang_prefill"]),
    ({"sglang_router_health_check_endpoint": "health_generate"}, ["sglang_router_health_check_endpoint", "not a path"]),
    ({"sglang_router_ready_path": "http://10.0.0.2:30000/readiness"}, ["sglang_router_ready_path", "a URL", "/readiness"]),
    ({"sglang_worker_health_path": "health generate"}, ["sglang_worker_health_path", "not a path"]),
    ({"sglang_worker_options": {"--mem-fraction-static": 0.8}},
     ["sglang_worker_options.--mem-fraction-static", "ServerArgs field", "write mem_fraction_static"]),
    ({"sglang_pd_prefill_workers": [{"args": {"--chunked-prefill-size": 8192}}]},
     ["args in sglang_pd_prefill_workers.--chunked-prefill-size", "write chunked_prefill_size"]),
], ids=lambda v: str(v)[:60])
def test_the_mistake_is_refused_with_its_cause_and_fix(values, expected):
    found = problems_with(**values)
    assert found, f"{values} passed the preflight"
    assert any(all(part in text for part in expected) for text in found), found
    # One mistake, one message: no second, unrelated complaint about the same value.
    assert len(found) == 1, found


@pytest.mark.parametrize("values", [
    {"sglang_pd_image_repository": "registry.local:5000/sglang-pd"},
    {"sglang_pd_image_repository": "[fd00::1]:5443/mindverse/sglang"},
    {"sglang_pd_image_repository": "MyACR.azurecr.io/mindverse/sglang"},
    {"sglang_pd_image_repository": "localhost/sglang__pd/unified-2"},
    dict(MOUNT, sglang_pd_model_path="/models/glm-5.2-fp8"),
    {"sglang_pd_model_path": "/opt/model-in-image"},
    {"sglang_worker_rocm_env": {"HIP_VISIBLE_DEVICES": "0,1,2,3"}},
    {"sglang_router_health_check_endpoint": "/health"},
    {"sglang_worker_health_path": "/health_generate?rid=probe"},
    {"sglang_worker_options": {"mem_fraction_static": 0.8}},
], ids=lambda v: str(v)[:60])
def test_what_docker_and_sglang_take_still_passes(values):
    assert problems_with(**values) == []
