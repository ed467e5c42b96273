"""The node's state and cache folders have one spelling: /var/lib/sglang-pd and /var/cache/sglang-pd.

The underscore spelling of earlier releases may appear only where the sglang_image role carries
their state over and removes it (roles/sglang_image: vars/main.yml, tasks/record.yml), and in
the changelog.
"""

from __future__ import annotations

import os
import re
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
OLD_SPELLING = re.compile(r'/var/(lib|cache)/sglang_pd\b')
CARRY_OVER = {'roles/sglang_image/vars/main.yml', 'roles/sglang_image/tasks/record.yml', 'CHANGELOG.md'}


def _tracked_files():
    listing = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
                             cwd=REPO, capture_output=True, check=True).stdout.decode()
    return [name for name in listing.split('\0') if name and os.path.isfile(os.path.join(REPO, name))]


def old_spellings(files):
    """(file, line number) of every old spelling outside the carry-over."""
    found = []
    for name in files:
        if name in CARRY_OVER or name == 'tests/unit/test_state_folders.py':
            continue
        try:
            with open(os.path.join(REPO, name), encoding='utf-8') as handle:
                lines = handle.readlines()
        except UnicodeDecodeError:
            continue
        found += [(name, number) for number, line in enumerate(lines, 1) if OLD_SPELLING.search(line)]
    return found


def test_state_and_cache_folders_have_one_spelling():
    assert old_spellings(_tracked_files()) == []


def test_an_old_spelling_is_found():
    assert OLD_SPELLING.search('path: /var/cache/sglang_pd/artifacts')
    assert not OLD_SPELLING.search('path: /var/cache/sglang-pd/artifacts')
