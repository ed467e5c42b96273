# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every filter the collection registers is called by YAML: its roles and playbooks, or the fleet's checks.

A filter no playbook calls is code no run exercises: the preflight's checks and the helpers
the filters share are plain functions (plugins/plugin_utils/preflight/, module_utils), not filters.
"""

from __future__ import annotations

import importlib
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[4]
YAML_FOLDERS = ("roles", "playbooks", "molecule", "tests/fleet")


def _registered():
    names = {}
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.mindverse.sglang_pd.plugins.filter.{path.stem}")
        for name in module.FilterModule().filters():
            assert name not in names, f"{name} is registered by {names.get(name)} and {path.name}"
            names[name] = path.name
    return names


def _yaml_text():
    return "\n".join(path.read_text() for folder in YAML_FOLDERS for path in sorted((REPO / folder).rglob("*"))
                     if path.suffix in (".yml", ".yaml", ".j2"))


def test_every_registered_filter_is_called_by_yaml():
    text = _yaml_text()
    unused = sorted(f"{name} ({source})" for name, source in _registered().items()
                    if not re.search(rf"mindverse\.sglang_pd\.{re.escape(name)}\b", text))
    assert unused == []
