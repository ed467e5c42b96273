# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The facts the collection's plays set under its own names are listed for the preflight.

A playbook that imports another (rollback.yml imports rolling_upgrade.yml) runs the preflight
after earlier plays set facts: the preflight must take those for this run's results, and still
refuse an unknown variable of the inventory. The list in playbooks/vars/preflight.yml is kept
equal to the set_fact tasks here, so a new published fact cannot stop a later preflight.
"""

from __future__ import annotations

import pathlib

import yaml

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import VARIABLE_PREFIXES
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight import checks

REPO = pathlib.Path(__file__).resolve().parents[2]
NESTED = ("tasks", "block", "rescue", "always", "pre_tasks", "post_tasks", "handlers")


def _set_fact_names(node):
    if isinstance(node, list):
        for item in node:
            yield from _set_fact_names(item)
    elif isinstance(node, dict):
        for key in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(node.get(key), dict):
                yield from (name for name in node[key] if name.startswith(VARIABLE_PREFIXES))
        for key in NESTED:
            yield from _set_fact_names(node.get(key))


def _specs():
    specs = set()
    for path in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(path.read_text())["argument_specs"].values():
            specs.update(entry.get("options") or {})
    specs.update(yaml.safe_load((REPO / "playbooks/vars/sglang_pd_variables.yml").read_text())["sglang_pd_variables"])
    return specs


def _published():
    return yaml.safe_load((REPO / "playbooks/vars/preflight.yml").read_text())["published_facts"]


def test_the_list_is_the_facts_the_plays_set_that_no_spec_takes():
    files = sorted(REPO.glob("roles/*/tasks/**/*.yml")) + sorted(REPO.glob("playbooks/**/*.yml"))
    found = {name for path in files for name in _set_fact_names(yaml.safe_load(path.read_text()))}
    assert "sglang_image_history" in found
    assert sorted(found - _specs()) == sorted(_published())


def test_a_published_fact_passes_and_an_unknown_variable_is_still_refused():
    specs = {"sglang_pd_image_digest": {"type": "str"}}
    hostvars = {"node": {"sglang_image_history": [{"digest": "sha256:" + "a" * 64, "held": True}],
                         "sglang_image_histroy": []}}
    problems = checks.pd_check_variables(hostvars, ["node"], specs, {}, frozenset(_published()))
    assert [problem for problem in problems if "sglang_image_history" in str(problem)
            and "sglang_image_histroy" not in str(problem)] == []
    assert any("sglang_image_histroy" in str(problem) for problem in problems)
    assert any("sglang_image_history" in str(problem)
               for problem in checks.pd_check_variables(hostvars, ["node"], specs, {}, frozenset()))
