"""Every ansible-playbook command the README and docs/ show still fits the playbooks.

A renamed variable slipped once (the README upgraded with one digest variable, the playbook
asked for another). Each documented command is checked: its playbook exists and passes
--syntax-check, and every variable it sets with -e is one the collection reads (an argument
spec, a playbook, a role's tasks) and not one the preflight refuses as removed.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DOCS = [os.path.join(REPO, 'README.md')] + sorted(
    p for p in glob.glob(os.path.join(REPO, 'docs', '*.md')) if not p.endswith('benchmarks.md'))
VENV_BIN = os.path.dirname(sys.executable)
SHELL_BLOCKS = ('', 'sh', 'bash', 'console')


def _commands():
    found = []
    for path in DOCS:
        block, pending = None, ''
        with open(path, encoding='utf-8') as handle:
            for number, line in enumerate(handle, 1):
                if line.startswith('```'):
                    block = line.strip()[3:].strip() if block is None else None
                    continue
                text = line.strip()
                in_shell = block in SHELL_BLOCKS
                if not in_shell and not text.startswith('`ansible-playbook'):
                    continue
                text = text.strip('`')
                if pending:
                    text, pending = pending + ' ' + text, ''
                if text.endswith('\\'):
                    pending = text[:-1]
                    continue
                # The quickstart runs the venv's ansible-playbook by its path.
                text = text[len('venv/bin/'):] if text.startswith('venv/bin/ansible-playbook ') else text
                if text.startswith('ansible-playbook '):
                    command = text.split('#', 1)[0].strip().strip('`.')
                    found.append(('%s:%d' % (os.path.relpath(path, REPO), number), command))
    return found


COMMANDS = _commands()


def _known_variables():
    names = set()
    for spec in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')):
        with open(spec, encoding='utf-8') as handle:
            for entry in yaml.safe_load(handle)['argument_specs'].values():
                names.update((entry.get('options') or {}).keys())
    words = set()
    for path in glob.glob(os.path.join(REPO, 'playbooks', '**', '*.yml'), recursive=True) + \
            glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml')):
        with open(path, encoding='utf-8') as handle:
            words.update(re.findall(r'\b[a-z][a-z0-9_]+\b', handle.read()))
    return names | words


def _removed_variables():
    with open(os.path.join(REPO, 'playbooks', 'vars', 'preflight.yml'), encoding='utf-8') as handle:
        return set(yaml.safe_load(handle)['removed_variables'])


def _extra_var_names(argv):
    names = []
    for index, token in enumerate(argv):
        if token in ('-e', '--extra-vars') and index + 1 < len(argv) and not argv[index + 1].startswith('@'):
            names += [pair.split('=', 1)[0] for pair in argv[index + 1].split() if '=' in pair]
    return names


def test_the_docs_show_the_day2_commands():
    playbooks = {shlex.split(c)[1] for _w, c in COMMANDS}
    assert {'site.yml', 'playbooks/scale_out.yml', 'playbooks/scale_in.yml', 'playbooks/rolling_upgrade.yml',
            'playbooks/render.yml'} <= playbooks


@pytest.mark.parametrize('where, command', COMMANDS, ids=[w for w, _c in COMMANDS])
def test_documented_variables_are_read_and_not_removed(where, command):
    known, removed = _known_variables(), _removed_variables()
    for name in _extra_var_names(shlex.split(command)):
        assert name not in removed, '%s: %s sets %s, which the preflight refuses as removed' % (where, command, name)
        assert name in known, '%s: %s sets %s, which nothing in the collection reads' % (where, command, name)


def _playbook_file(playbook):
    """The file of a documented playbook: a path, or an entry point by its collection name."""
    prefix = 'mindverse.sglang_pd.'
    return os.path.join('playbooks', playbook[len(prefix):] + '.yml') if playbook.startswith(prefix) else playbook


def test_the_release_commands_name_entry_points_by_collection_name():
    released = {shlex.split(c)[1] for _w, c in COMMANDS if shlex.split(c)[1].startswith('mindverse.sglang_pd.')}
    assert {'mindverse.sglang_pd.site', 'mindverse.sglang_pd.preflight', 'mindverse.sglang_pd.status'} <= released, released


@pytest.mark.parametrize('playbook', sorted({shlex.split(c)[1] for _w, c in COMMANDS}))
def test_documented_playbooks_pass_syntax_check(playbook):
    assert os.path.isfile(os.path.join(REPO, _playbook_file(playbook))), playbook
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='true',
               PATH=VENV_BIN + os.pathsep + os.environ.get('PATH', ''))
    result = subprocess.run(['ansible-playbook', '--syntax-check', '-i', 'inventories/example-1p3d', playbook],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
