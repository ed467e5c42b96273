"""Make the collection importable as ansible_collections.mindverse.sglang_pd in unit tests."""

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

# Ansible's collection loader, before anything imports ansible_collections (as ansible-test's
# unit tests do): Ansible's templar then finds the collection's filters (tests/unit/preflight_engine.py).
from ansible.utils.collection_loader import AnsibleCollectionConfig  # noqa: E402  pylint: disable=wrong-import-position
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder  # noqa: E402  pylint: disable=wrong-import-position

if AnsibleCollectionConfig.collection_finder is None:
    _AnsibleCollectionFinder(paths=[COLLECTIONS])._install()
# tests/image_names.py: the images set-up builds.
if os.path.join(REPO, 'tests') not in sys.path:
    sys.path.insert(0, os.path.join(REPO, 'tests'))
