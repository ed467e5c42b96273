# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory preflight on the controller (documented in plugins/modules/preflight.py): contacts no host."""
from __future__ import annotations

import glob
import os

from ansible.plugins.action import ActionBase

from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.model import RESOLVED_ROLES
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.problems import CHECK_IDS
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.preflight.runner import CHECKS, TITLES, run_checks

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class ActionModule(ActionBase):
    """Run every inventory check; report the first failing check's problems."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset()

    def _load(self, *parts, trusted=False):
        return self._loader.load_from_file(os.path.join(COLLECTION, *parts), trusted_as_template=trusted) or {}

    def _sources(self):
        """The role defaults (trusted templates, so the templar resolves them per host), every option taken, the removed variables, the published facts."""
        defaults = {role: self._load("roles", role, "defaults", "main.yml", trusted=True) for role in RESOLVED_ROLES}
        specs = {}
        for path in sorted(glob.glob(os.path.join(COLLECTION, "roles", "*", "meta", "argument_specs.yml"))):
            for entry_point in (self._loader.load_from_file(path) or {}).get("argument_specs", {}).values():
                specs.update(entry_point.get("options") or {})
        specs.update(self._load("playbooks", "vars", "sglang_pd_variables.yml").get("sglang_pd_variables") or {})
        lists = self._load("playbooks", "vars", "preflight.yml")
        return {"defaults": defaults, "specs": specs, "removed": lists.get("removed_variables") or {},
                "published": frozenset(lists.get("published_facts") or ())}

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        result.update(changed=False, checks=list(CHECKS))
        try:
            outcome = run_checks(self._templar, task_vars["hostvars"], task_vars["groups"], self._sources())
        except Exception as exc:  # pylint: disable=broad-except
            # The caller runs this task with no_log (the plan holds API keys), which would hide the
            # error: it is returned as the problem of a check the caller's assert shows.
            result.update(failed_check="preflight", model=None, problems={"preflight": [f"{type(exc).__name__}: {exc}"]},
                          msg=f"The preflight itself failed, before any check could report: a defect of the collection. [{CHECK_IDS['preflight']}]")
            return result
        failed = outcome["failed"]
        result.update(failed_check=failed, problems=outcome["problems"], model=outcome["model"],
                      msg=f"The inventory fails the {failed} check: {TITLES[failed]}. [{CHECK_IDS[failed]}]" if failed else f"All {len(CHECKS)} checks passed.")
        return result
