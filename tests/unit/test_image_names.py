"""No file names a test image that set-up does not build.

A scenario that named a fixed node tag passed only on machines that still held that
tag from earlier work. Every sglang-pd-test/* image named anywhere in the repository must be
one that scripts/setup/image_names.sh names (and set-up builds); the scenarios and tests take
the names from there.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess

from image_names import REPO, SCRIPT, setup_image_names

PREFIX = 'sglang-pd-test/'
IMAGE_REFERENCE = re.compile(re.escape(PREFIX) + r'[A-Za-z0-9._-]+(?::[A-Za-z0-9._-]+)?')


def _repository_files():
    listed = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
                            cwd=REPO, capture_output=True, check=True).stdout.decode()
    for relative in sorted(set(filter(None, listed.split('\0')))):
        path = os.path.join(REPO, relative)
        if os.path.isfile(path) and not os.path.islink(path) and path != SCRIPT:
            yield relative, path


def _references():
    for relative, path in _repository_files():
        with open(path, 'rb') as handle:
            text = handle.read().decode('utf-8', errors='replace')
        for number, line in enumerate(text.splitlines(), 1):
            for match in IMAGE_REFERENCE.finditer(line):
                yield '%s:%d' % (relative, number), match.group(0)


def _normalised(reference):
    return reference if ':' in reference.split('/')[-1] else reference + ':latest'


def test_set_up_names_every_image_it_builds_under_the_prefix():
    names = setup_image_names()
    assert set(names) == {'SGLANG_PD_BASE_IMAGE', 'SGLANG_PD_NODE_IMAGE', 'SGLANG_PD_EE_BASE_IMAGE', 'SGLANG_PD_EE_IMAGE'}
    assert all(IMAGE_REFERENCE.fullmatch(image) for image in names.values()), names


def _sha12(data):
    return hashlib.sha256(data).hexdigest()[:12]


def test_image_tags_follow_what_the_images_are_built_from():
    """A changed recipe gets a new tag, so no image left from earlier work is reused."""
    with open(os.path.join(REPO, 'scripts', 'setup', 'base_image.sh'), 'rb') as handle:
        base_tag = _sha12(handle.read())
    with open(os.path.join(REPO, 'tests', 'images', 'node', 'Dockerfile'), 'rb') as handle:
        node_tag = _sha12(handle.read() + (base_tag + '\n').encode())
    with open(os.path.join(REPO, 'tests', 'images', 'ee-base', 'Dockerfile'), 'rb') as handle:
        ee_base_tag = _sha12(handle.read() + (base_tag + '\n').encode())
    names = setup_image_names()
    assert names['SGLANG_PD_BASE_IMAGE'] == PREFIX + 'debian-base:' + base_tag
    assert names['SGLANG_PD_NODE_IMAGE'] == PREFIX + 'node:' + node_tag
    assert names['SGLANG_PD_EE_BASE_IMAGE'] == PREFIX + 'ee-base:' + ee_base_tag


def test_every_named_test_image_is_one_set_up_builds():
    built = set(setup_image_names().values())
    stray = ['%s names %s' % (where, image) for where, image in _references()
             if _normalised(image) not in built]
    assert not stray, 'images that set-up does not build (take them from scripts/setup/image_names.sh):\n' \
        + '\n'.join(stray)


def test_the_guard_finds_a_stale_tag(tmp_path):
    """The scan itself: a stale tag in a scenario file is reported, a built one is not."""
    built = set(setup_image_names().values())
    line = 'image: %snode:12  # and %s' % (PREFIX, sorted(built)[0])
    found = [m.group(0) for m in IMAGE_REFERENCE.finditer(line)]
    assert [image for image in found if _normalised(image) not in built] == [PREFIX + 'node:12']
