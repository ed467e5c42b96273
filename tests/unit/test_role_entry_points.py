# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every role entry point another playbook calls (``tasks_from``) has an argument spec.

Ansible checks a call against its entry point's spec before the first task runs, and
ansible-doc documents it: a role's entry points are its interface, not its file names.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
CALL = re.compile(r"name:\s*mindverse\.sglang_pd\.(\w+)\s*\n\s*tasks_from:\s*([\w.]+)")


def _calls(keep_suffix=False):
    found = set()
    for path in sorted(REPO.glob("playbooks/**/*.yml")) + sorted(REPO.glob("roles/*/tasks/*.yml")):
        for role, tasks in CALL.findall(path.read_text()):
            found.add((role, tasks if keep_suffix else tasks.removesuffix(".yml"), str(path.relative_to(REPO))))
    return sorted(found)


def test_each_call_names_the_entry_point_so_ansible_checks_it():
    """Ansible looks the spec up by tasks_from as written: `register.yml` finds no spec named so and
    checks nothing; `register` is checked against the entry point's spec before its first task."""
    assert [call for call in _calls(keep_suffix=True) if call[1].endswith(".yml")] == []


def test_the_calls_are_found():
    assert len({(role, entry) for role, entry, _where in _calls()}) >= 15


@pytest.mark.parametrize("role, entry, where", _calls(), ids=str)
def test_each_entry_point_called_has_a_spec(role, entry, where):
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert entry in specs, f"{where} calls {role}'s {entry}, which roles/{role}/meta/argument_specs.yml does not describe"
    assert (REPO / "roles" / role / "tasks" / f"{entry}.yml").exists()
    assert specs[entry].get("short_description") and "options" in specs[entry]


def test_no_playbook_reads_a_roles_private_variable():
    roles = sorted(path.name for path in (REPO / "roles").iterdir() if path.is_dir())
    private = re.compile(r"\b__(?:%s)_\w+" % "|".join(map(re.escape, roles)))
    found = [f"{path.relative_to(REPO)}: {match}" for path in sorted(REPO.glob("playbooks/**/*.yml"))
             for match in private.findall(path.read_text())]
    assert found == []


def test_no_playbook_reads_rolling_state():
    # The rolling restart's state lives in the sglang_roll role: a playbook passes its inputs as the
    # role's arguments and reads only the facts its entry points document.
    found = [f"{path.relative_to(REPO)}: {match}" for path in sorted(REPO.glob("playbooks/**/*.yml")) + [REPO / "site.yml"]
             for match in re.findall(r"\b__roll_\w+", path.read_text())]
    assert found == []
