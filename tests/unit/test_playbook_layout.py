# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The top level of playbooks/ is what an operator runs; playbooks/stages/ is what those import.

An entry point is a playbook README.md or docs/*.md tell an operator to run, by its path
(``ansible-playbook playbooks/scale_out.yml``) or its collection name
(``ansible-playbook mindverse.sglang_pd.host_stack``); the root site.yml is the checkout's name of
playbooks/site.yml. Every other playbook is a stage or a fragment an entry point imports.
"""

from __future__ import annotations

import pathlib
import re

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"
STAGES = PLAYBOOKS / "stages"
DOCS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
# What follows `ansible-playbook` on its line, up to the end of an inline code span.
COMMAND = re.compile(r"ansible-playbook\b([^`\n]*)")
# The playbook of a command: a path in the collection, the root site.yml, or a collection name.
PLAYBOOK = re.compile(r"(?<![\w/.])(playbooks/[\w/]+\.yml|site\.yml|mindverse\.sglang_pd\.[a-z_][\w.]*[a-z_])")
IMPORT = "ansible.builtin.import_playbook"


def _imports(path):
    """The playbooks PATH imports, as files (none from a tasks or vars file)."""
    plays = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [(path.parent / play[IMPORT]).resolve() for play in plays if IMPORT in play] if isinstance(plays, list) else []


def _file(playbook):
    """The file a documented playbook runs."""
    if playbook.startswith("mindverse.sglang_pd."):
        return PLAYBOOKS.joinpath(*playbook.split(".")[2:]).with_suffix(".yml")
    path = REPO / playbook
    # The root site.yml only imports playbooks/site.yml (docs/architecture.md).
    return _imports(path)[0] if path.parent == REPO else path.resolve()


def _documented():
    """{file a command runs: where the docs show it}"""
    found = {}
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for command in COMMAND.findall(line):
                playbook = PLAYBOOK.search(command)
                if playbook:
                    found.setdefault(_file(playbook.group(1)), f"{doc.relative_to(REPO)}:{number}")
    return found


def test_every_top_level_playbook_is_an_entry_point_the_docs_tell_to_run():
    documented = _documented()
    undocumented = sorted(path.name for path in PLAYBOOKS.glob("*.yml") if path.resolve() not in documented)
    assert undocumented == [], (f"{undocumented}: no command in README.md or docs/ runs these; a stage or "
                                "fragment belongs in playbooks/stages/, an entry point gets its command in the docs")


def test_the_docs_run_no_stage_or_fragment():
    commands = [f"{where}: {path.relative_to(REPO)}" for path, where in _documented().items()
                if path.parent != PLAYBOOKS.resolve()]
    assert commands == [], "the docs tell an operator to run a playbook below playbooks/: make it an entry point"


def test_the_documented_commands_are_found():
    assert len(_documented()) >= 10


def test_every_stage_is_imported():
    imported = {target for path in PLAYBOOKS.rglob("*.yml") for target in _imports(path)}
    orphans = sorted(path.name for path in STAGES.glob("*.yml") if path.resolve() not in imported)
    assert orphans == [], f"{orphans}: no playbook imports these stages"
