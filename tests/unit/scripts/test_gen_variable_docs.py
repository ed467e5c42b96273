# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/variables.md is generated from the argument specs and stays in step with them."""

from __future__ import annotations

import importlib.util
import os

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SPEC = importlib.util.spec_from_file_location("gen_variable_docs", os.path.join(REPO, "scripts", "gen_variable_docs.py"))
gen = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gen)


def test_variables_md_is_in_step_with_the_specs():
    with open(os.path.join(REPO, "docs", "variables.md"), encoding="utf-8") as handle:
        assert handle.read() == gen.generate(), "docs/variables.md is out of date: run python scripts/gen_variable_docs.py"


def _load(path):
    with open(os.path.join(REPO, path), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_every_default_of_the_launch_roles_has_a_spec():
    for role in ("sglang_worker", "sglang_router"):
        defaults = _load(f"roles/{role}/defaults/main.yml")
        options = _load(f"roles/{role}/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
        assert sorted(defaults) == sorted(options), role


def test_markup():
    assert gen._markup("C(--tp-size) and I(x) | y") == "`--tp-size` and *x* \\| y"  # pylint: disable=protected-access
