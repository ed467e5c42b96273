# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every test module under tests/ has a basename of its own.

`make test` collects tests/unit and tests/integration in one pytest run. Their folders are no
packages, so pytest imports each test module by its basename: two files with the same name make
the whole collection fail ("import file mismatch"), and a helper imported by name
(`from test_site_preflight import run`) may resolve to the other one.
"""

from __future__ import annotations

import collections
import os

TESTS = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))


def modules_by_basename(root=TESTS):
    found = collections.defaultdict(list)
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith('test_') and name.endswith('.py'):
                found[name].append(os.path.relpath(os.path.join(folder, name), root))
    return found


def test_no_two_test_modules_share_a_basename():
    shared = {name: paths for name, paths in modules_by_basename().items() if len(paths) > 1}
    assert not shared, 'rename one of each: %s' % shared
