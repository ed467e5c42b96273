# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Verify (and fetch) a pinned prebuilt binary such as Mooncake's engine_v3.so (private: the API may change).

A clone without ``git lfs pull`` holds a small text file (a Git LFS pointer) where
the binary should be; it is recognised and refused with the command that fixes it.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from urllib.parse import urlparse

from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import fetch_url

LFS_SPEC_PREFIX = b'version https://git-lfs.github.com/spec/v1'
# The spec caps pointer files at 1024 bytes.
LFS_POINTER_MAX_SIZE = 1024
CHUNK = 1024 * 1024

_OID_RE = re.compile(br'^oid sha256:([0-9a-f]{64})\s*$', re.MULTILINE)
_SIZE_RE = re.compile(br'^size (\d+)\s*$', re.MULTILINE)
_MD5_RE = re.compile(r'^[0-9a-f]{32}$')
_SHA256_RE = re.compile(r'^[0-9a-f]{64}$')


class ArtifactError(Exception):
    """The artifact is missing, is an LFS pointer or does not match its checksums."""


def _md5():
    try:
        return hashlib.md5(usedforsecurity=False)
    except TypeError:  # Python < 3.9
        return hashlib.md5()  # nosec - a checksum pin, not a security control


def parse_lfs_pointer(head):
    """Return {'oid': sha256 hex, 'size': int} if ``head`` (the first bytes of a file) is a Git LFS pointer, else None."""
    if not head.startswith(LFS_SPEC_PREFIX):
        return None
    oid = _OID_RE.search(head)
    size = _SIZE_RE.search(head)
    if not oid or not size:
        return None
    return dict(oid=to_native(oid.group(1)), size=int(size.group(1)))


def lfs_pointer_of(path):
    """Return the parsed LFS pointer if the file at ``path`` is one, else None."""
    if os.path.getsize(path) > LFS_POINTER_MAX_SIZE:
        return None
    with open(path, 'rb') as handle:
        return parse_lfs_pointer(handle.read(LFS_POINTER_MAX_SIZE + 1))


def file_digests(path):
    """Return (md5 hex, sha256 hex, size in bytes) of the file at ``path``."""
    md5 = _md5()
    sha256 = hashlib.sha256()
    size = 0
    with open(path, 'rb') as handle:
        while True:
            block = handle.read(CHUNK)
            if not block:
                break
            md5.update(block)
            sha256.update(block)
            size += len(block)
    return md5.hexdigest(), sha256.hexdigest(), size


def lfs_message(where, pointer, expected_sha256=None):
    msg = ('%s is a Git LFS pointer file (oid sha256:%s, size %d bytes), not the binary itself. '
           'Run `git lfs pull` in the clone that holds it (for this file only: '
           '`git lfs pull --include=<path of the file in the repository>`), then run again.'
           % (where, pointer['oid'], pointer['size']))
    if expected_sha256 and pointer['oid'] == expected_sha256:
        msg += ' The pointer does refer to the expected object (its oid equals the sha256 you pinned).'
    return msg


def verify_file(path, md5, sha256=None, where=None):
    """Check the file at ``path``; return dict(md5, sha256, size) or raise ArtifactError."""
    where = where or path
    pointer = lfs_pointer_of(path)
    if pointer:
        raise ArtifactError(lfs_message(where, pointer, sha256))
    actual_md5, actual_sha256, size = file_digests(path)
    if actual_md5 != md5:
        raise ArtifactError('%s has md5 %s, expected %s (size %d bytes). It is not the pinned build: fetch the pinned '
                            'artifact again, or update the pinned md5 if the artifact was rebuilt on purpose.'
                            % (where, actual_md5, md5, size))
    if sha256 and actual_sha256 != sha256:
        raise ArtifactError('%s has sha256 %s, expected %s (its md5 matches). Check which of the two pins is wrong.'
                            % (where, actual_sha256, sha256))
    return dict(md5=actual_md5, sha256=actual_sha256, size=size)


def _matches(path, md5, sha256):
    if not os.path.isfile(path):
        return False
    try:
        verify_file(path, md5, sha256)
    except ArtifactError:
        return False
    return True


def _dest_of(url, dest):
    if os.path.isdir(dest):
        name = os.path.basename(urlparse(url).path)
        if not name:
            raise ArtifactError('dest %s is a directory and the URL %s has no file name; give dest as a file path'
                                % (dest, url))
        return os.path.join(dest, name)
    return dest


def _download(module, url, dest_dir):
    """Stream ``url`` into a temporary file in ``dest_dir``; return its path."""
    resp, info = fetch_url(module, url, headers=module.params['headers'], timeout=module.params['timeout'])
    if resp is None or info.get('status') != 200:
        raise ArtifactError('GET %s answered %s: %s. Check the URL and its credentials.'
                            % (url, info.get('status'), info.get('msg')))
    fd, tmp = tempfile.mkstemp(prefix='.prebuilt_artifact.', dir=dest_dir)
    try:
        with os.fdopen(fd, 'wb') as handle:
            while True:
                block = resp.read(CHUNK)
                if not block:
                    break
                handle.write(block)
    except Exception:
        os.unlink(tmp)
        raise
    return tmp


def _normalise_pins(module):
    md5 = module.params['md5'].strip().lower()
    sha256 = (module.params['sha256'] or '').strip().lower() or None
    if not _MD5_RE.match(md5):
        module.fail_json(msg='md5 %r is not 32 hex digits [SGLPD-IMG-010]' % module.params['md5'])
    if sha256 and not _SHA256_RE.match(sha256):
        module.fail_json(msg='sha256 %r is not 64 hex digits [SGLPD-IMG-010]' % module.params['sha256'])
    return md5, sha256


def _run_path(module, md5, sha256):
    path = module.params['path']
    if not os.path.isfile(path):
        module.fail_json(msg='%s does not exist or is not a file; give the path of the prebuilt binary '
                         '(for example patches/mooncake/engine_v3.so of the production fork) [SGLPD-IMG-011]' % path, path=path)
        return
    try:
        digests = verify_file(path, md5, sha256)
    except ArtifactError as exc:
        module.fail_json(msg=to_native(exc) + ' [SGLPD-IMG-012]', path=path)
        return
    module.exit_json(changed=False, path=path, downloaded=False, **digests)


def _run_url(module, md5, sha256):
    url = module.params['url']
    try:
        dest = _dest_of(url, module.params['dest'])
    except ArtifactError as exc:
        module.fail_json(msg=to_native(exc) + ' [SGLPD-IMG-013]')
        return
    if _matches(dest, md5, sha256):
        digests = verify_file(dest, md5, sha256)
        module.exit_json(changed=False, path=dest, url=url, downloaded=False, **digests)
        return
    if module.check_mode:
        module.exit_json(changed=True, path=dest, url=url, downloaded=False, md5=md5, sha256=sha256, size=None,
                         msg='check mode: %s would be downloaded to %s and verified' % (url, dest))
        return
    dest_dir = os.path.dirname(dest) or '.'
    if not os.path.isdir(dest_dir):
        module.fail_json(msg='the directory of dest %s does not exist; create it first [SGLPD-IMG-013]' % dest)
        return
    tmp = None
    try:
        tmp = _download(module, url, dest_dir)
        digests = verify_file(tmp, md5, sha256, where='the download from %s' % url)
    except ArtifactError as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        module.fail_json(msg=to_native(exc) + ' %s was left unchanged. [SGLPD-IMG-012]' % dest, url=url, path=dest)
        return
    except (IOError, OSError) as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        module.fail_json(msg='downloading %s into %s failed: %s [SGLPD-IMG-014]' % (url, dest_dir, to_native(exc)), url=url, path=dest)
        return
    module.atomic_move(tmp, dest)
    module.exit_json(changed=True, path=dest, url=url, downloaded=True, **digests)


def run_prebuilt_artifact_module(module):
    md5, sha256 = _normalise_pins(module)
    if module.params['path']:
        _run_path(module, md5, sha256)
    else:
        _run_url(module, md5, sha256)
