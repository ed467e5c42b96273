"""Make the collection importable as ansible_collections.mindverse.sglang_pd in integration tests."""

from __future__ import annotations

import os
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
COLLECTIONS = os.path.join(REPO, '.cache', 'collections')
_LINK = os.path.join(COLLECTIONS, 'ansible_collections', 'mindverse', 'sglang_pd')

if not os.path.exists(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    os.symlink(os.path.relpath(REPO, os.path.dirname(_LINK)), _LINK)

if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
# tests/image_names.py: the images set-up builds.
if os.path.join(REPO, 'tests') not in sys.path:
    sys.path.insert(0, os.path.join(REPO, 'tests'))
# tests/unit/module_runner.py: runs a module in-process (test_smg_router.py).
if os.path.join(REPO, 'tests', 'unit') not in sys.path:
    sys.path.append(os.path.join(REPO, 'tests', 'unit'))
