# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mindverse.sglang_pd.preflight on in-memory inventories: the collection's own defaults and specs, Ansible's templar.

plugins/modules/preflight.py documents it; plugins/action/preflight.py runs it (the module has no code of its own).

The same action runs end to end through site.yml in tests/integration/test_site_preflight.py.
"""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.mindverse.sglang_pd.plugins.action import preflight

DIGEST = "sha256:" + "ab" * 32
COMMON = {"sglang_pd_image_repository": "registry.example.com/mindverse/sglang", "sglang_pd_image_digest": DIGEST,
          "sglang_pd_model_path": "/models/m", "sglang_router_api_key": "k-unit",
          "sglang_pd_cluster_cidr": "10.0.0.0/16", "sglang_pd_client_cidrs": ["10.1.0.0/16"]}
GROUPS = {"sglang_pd": ["p0", "d0"], "sglang_prefill": ["p0"], "sglang_decode": ["d0"], "sglang_router": ["d0"]}


def run_action(**overrides):
    hostvars = {"p0": dict(COMMON, sglang_pd_service_address="10.0.0.1"),
                "d0": dict(COMMON, sglang_pd_service_address="10.0.0.2")}
    for one in hostvars.values():
        one.update(overrides)
    task = MagicMock(args={}, async_val=0, check_mode=False, diff=False)
    loader = DataLoader()
    action = preflight.ActionModule(task, MagicMock(), MagicMock(), loader, Templar(loader=loader), None)
    return action.run(task_vars={"hostvars": hostvars, "groups": GROUPS})


def test_a_valid_inventory_passes_every_check_and_returns_the_plan():
    result = run_action()
    assert result["failed_check"] is None, result["problems"]
    assert result["msg"] == f"All {len(preflight.CHECKS)} checks passed."
    assert set(result["problems"]) == set(preflight.CHECKS)
    # The router's image is its role default, templated by Ansible from the host's variables.
    router = result["model"]["routers"][0]
    assert router["role_vars"]["sglang_router_image"] == "registry.example.com/mindverse/sglang@" + DIGEST
    assert not result.get("failed")


@pytest.mark.parametrize("overrides, check, fragment", [
    ({"sglang_pd_image_digest": "sha256:2d7471420f60"}, "image", "pinned by its full digest"),
    ({"sglang_worker_trust_remote_code": "false"}, "variables", '"false": a string, not a boolean'),
    ({"sglang_worker_kv_cache_dtype": "fp8"}, "variables", "did you mean"),
    # Shapes the argument specs give: refused by the variables check, before the checks that read them.
    ({"sglang_pd_decode_workers": "0-3"}, "variables", 'sglang_pd_decode_workers = "0-3": not a list'),
    ({"sglang_pd_decode_workers": ["0-3"]}, "variables", 'sglang_pd_decode_workers[0] = "0-3": not a dict'),
    ({"sglang_pd_image_artifacts": {"path": "/a"}}, "variables", "sglang_pd_image_artifacts = {\"path\": \"/a\"}: not a list"),
])
def test_the_first_failing_check_is_named_with_its_problems(overrides, check, fragment):
    result = run_action(**overrides)
    assert result["failed_check"] == check
    assert result["msg"] == f"The inventory fails the {check} check: {preflight.TITLES[check]}. [{preflight.CHECK_IDS[check]}]"
    assert any(fragment in line for line in result["problems"][check]), result["problems"][check]
    # The task itself never fails: the caller's assert shows the problems (the task runs with no_log).
    assert not result.get("failed")


def test_an_error_inside_the_checks_is_returned_as_a_problem_not_raised(monkeypatch):
    def broken(*_args):
        raise IndexError("list index out of range")
    monkeypatch.setattr(preflight, "run_checks", broken)
    result = run_action()
    assert result["failed_check"] == "preflight"
    assert result["problems"] == {"preflight": ["IndexError: list index out of range"]}
    assert result["model"] is None
