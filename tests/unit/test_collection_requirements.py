"""requirements.yml and galaxy.yml name every collection the project uses, in ranges the
pinned ansible bundle satisfies.

A user on ansible-core alone runs `ansible-galaxy collection install -r requirements.yml`;
`ansible-galaxy collection install mindverse.sglang_pd` resolves galaxy.yml's dependencies.
Both must hold every collection named by FQCN in roles, playbooks, plugins, inventories and
molecule, and the versions that requirements.txt pins must satisfy their ranges.
"""

from __future__ import annotations

import json
import os
import re

import ansible_collections
import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
SCANNED = ['roles', 'playbooks', 'plugins', 'inventories', 'molecule', 'site.yml', 'tests/fleet']
OWN = {'ansible.builtin', 'ansible.legacy', 'ansible.module_utils', 'mindverse.sglang_pd'}
FQCN = re.compile(r'\b([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*\b')


def _bundled():
    """{namespace.name: version} of the collections the installed ansible bundle carries."""
    found = {}
    for root in ansible_collections.__path__:
        for namespace in os.listdir(root):
            for name in os.listdir(os.path.join(root, namespace)) if os.path.isdir(os.path.join(root, namespace)) else []:
                manifest = os.path.join(root, namespace, name, 'MANIFEST.json')
                if os.path.isfile(manifest):
                    with open(manifest, encoding='utf-8') as handle:
                        found['%s.%s' % (namespace, name)] = json.load(handle)['collection_info']['version']
    return found


BUNDLED = _bundled()


def _used():
    used = {}
    for entry in SCANNED:
        top = os.path.join(REPO, entry)
        paths = [top] if os.path.isfile(top) else [os.path.join(d, f) for d, _s, fs in os.walk(top) for f in fs]
        for path in paths:
            if not path.endswith(('.yml', '.yaml', '.py', '.j2', '.cfg')):
                continue
            with open(path, encoding='utf-8', errors='replace') as handle:
                for match in FQCN.finditer(handle.read()):
                    collection = '%s.%s' % match.groups()
                    if collection in BUNDLED and collection not in OWN:
                        used.setdefault(collection, os.path.relpath(path, REPO))
    return used


def _requirements():
    with open(os.path.join(REPO, 'requirements.yml'), encoding='utf-8') as handle:
        return {c['name']: c['version'] for c in yaml.safe_load(handle)['collections']}


def _galaxy_dependencies():
    with open(os.path.join(REPO, 'galaxy.yml'), encoding='utf-8') as handle:
        return yaml.safe_load(handle)['dependencies']


def test_the_bundle_is_installed():
    assert 'community.docker' in BUNDLED, 'the ansible bundle of requirements.txt is not installed'


def test_requirements_and_galaxy_dependencies_agree():
    assert _requirements() == _galaxy_dependencies()


@pytest.mark.parametrize('source', ['requirements.yml', 'galaxy.yml'])
def test_every_used_collection_is_listed(source):
    listed = _requirements() if source == 'requirements.yml' else _galaxy_dependencies()
    missing = ['%s (used in %s)' % (c, where) for c, where in sorted(_used().items()) if c not in listed]
    assert not missing, '%s lacks: %s' % (source, ', '.join(missing))


def test_the_scan_finds_the_collections_we_know_we_use():
    assert {'community.docker', 'community.general', 'ansible.posix', 'azure.azcollection'} <= set(_used())


@pytest.mark.parametrize('collection', sorted(_requirements()))
def test_the_pinned_bundle_satisfies_the_range(collection):
    assert collection in BUNDLED, '%s is not in the pinned ansible bundle' % collection
    assert meets_requirements(BUNDLED[collection], _requirements()[collection]), \
        '%s %s is outside %s' % (collection, BUNDLED[collection], _requirements()[collection])
