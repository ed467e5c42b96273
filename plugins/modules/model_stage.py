#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_stage
short_description: Copy a model's files from one source until the directory matches its manifest
version_added: 0.1.0
description:
  - Makes the model directory O(path) on the node hold every file of O(manifest) with the listed size and
    sha256, copying what is missing or wrong from one source - an HTTP(S) base URL (O(url)) or a peer node
    that holds a verified copy and serves it with an rsync daemon (O(peer)).
  - A file counts as present when its size and sha256 match; hashes are cached per file (by size and
    modification time) in O(cache), so a re-run over an unchanged directory reads nothing.
  - When every file is present the module reports no change and does not contact the source, which then
    need not be given.
  - Before copying, the free space at O(path) must cover the bytes still to copy plus O(free_margin_bytes);
    otherwise the module fails without copying anything.
  - Each file is copied to a hidden C(.NAME.partial) file next to its final place, then its size and sha256
    are checked and it is renamed into place (mode 0644). A file that does not match is removed and the module
    fails naming the expected and the found sha256 and size. An interrupted copy is resumed on the next run
    (an HTTP C(Range) request, or rsync's delta transfer onto the partial file); when a resumed file does not
    match, it is copied once more from the start.
  - Files in O(path) that the manifest does not list are left alone.
extends_documentation_fragment:
  - mindverse.sglang_pd.model_hash_cache
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Hashes what is there and checks the free space; reports the files it would copy and writes nothing
      (not even the hash cache).
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  path:
    description:
      - The model directory on the node. It is created (with its parents) when files have to be copied.
    type: path
    required: true
  manifest:
    description:
      - "Manifest text: one C(SHA256  SIZE  NAME) line per file (NAME relative to O(path), with C(/) between
        directories, no whitespace). Blank lines and lines starting with C(#) are ignored."
      - Roles pass the content of a manifest file, for example V({{ lookup('file', 'glm.sha256') }}); the
        M(mindverse.sglang_pd.model_weights) module records one from a verified copy.
    type: str
    required: true
  url:
    description:
      - Base URL of the model's files; a file is fetched from O(url) + C(/) + its name (percent-encoded).
      - Mutually exclusive with O(peer).
    type: str
  url_query:
    description:
      - Query string appended to every file URL as C(?QUERY), for example a shared access signature.
      - It is never shown in a result or a message.
    type: str
  peer:
    description:
      - Address of a node that holds a verified copy, served by an rsync daemon; a file is fetched from
        C(rsync://PEER:PORT/MODULE/NAME).
      - Mutually exclusive with O(url).
    type: str
  peer_port:
    description:
      - Port of the peer's rsync daemon.
    type: int
    default: 8730
  peer_module:
    description:
      - Name of the rsync daemon module that serves the model directory on the peer.
    type: str
    default: model
  free_margin_bytes:
    description:
      - Bytes that must stay free at O(path) after the copy.
    type: int
    default: 0
  timeout:
    description:
      - Timeout in seconds of each HTTP request and read, or rsync's I/O and connection timeout.
    type: int
    default: 60
  validate_certs:
    description:
      - Verify TLS certificates of HTTPS URLs.
    type: bool
    default: true
requirements:
  - rsync on the node, with O(peer)
notes:
  - The peer's rsync daemon needs a read-only module for the model directory, for example
    C([model]) with C(path = /models/GLM-4.6) and C(read only = yes) in C(rsyncd.conf).
seealso:
  - module: mindverse.sglang_pd.model_weights
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Stage the model from blob storage (the token stays out of every message)
  mindverse.sglang_pd.model_stage:
    path: /models/GLM-4.6
    manifest: "{{ lookup('file', 'manifests/GLM-4.6.sha256') }}"
    url: https://models.blob.example.invalid/weights/GLM-4.6
    url_query: "{{ model_sas_token }}"
    free_margin_bytes: "{{ 50 * 1024 ** 3 }}"

- name: Stage the model from a node that already holds a verified copy
  mindverse.sglang_pd.model_stage:
    path: /models/GLM-4.6
    manifest: "{{ lookup('file', 'manifests/GLM-4.6.sha256') }}"
    peer: 10.0.0.11
    peer_module: glm
  register: glm_stage
"""

RETURN = r"""
copied:
  description: Names of the files copied in this run (in check mode, the files that would be copied).
  returned: always
  type: list
  elements: str
  sample: [model-00002-of-00003.safetensors]
bytes_copied:
  description: Total size of the copied files (in check mode, of the files that would be copied).
  returned: always
  type: int
  sample: 4194400
present:
  description: Number of manifest files that were already present and verified.
  returned: always
  type: int
  sample: 96
source:
  description: V(url) or V(peer), the source files were (or would be) copied from; null when nothing was copied.
  returned: always
  type: str
  sample: url
"""

import http.client
import os
import re
from urllib.error import HTTPError, URLError
from urllib.parse import parse_qsl, quote

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._free_space import free_bytes_at
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._model_weights import (
    HashCache,
    hash_with_cache,
    parse_manifest,
    save_cache,
    sha256_file,
)

NET_CHUNK = 1024 * 1024
MIN_SECRET_PART = 4
_CONTENT_RANGE_RE = re.compile(r'^bytes (\d+)-\d+/(?:\d+|\*)$')


class StageError(Exception):
    """Staging failed; ``str()`` is the message, free of secrets."""


class FetchError(StageError):
    def __init__(self, name, source, reason):
        super().__init__('%s: cannot fetch from %s: %s' % (name, source, reason))


# ----------------------------------------------------------------- helpers
class Scrubber:
    """Removes a secret (and its parts, raw and percent-encoded) from text."""

    def __init__(self, secret):
        parts = set()
        if secret:
            parts.update([secret, quote(secret, safe='')])
            for key, value in parse_qsl(secret, keep_blank_values=True):
                parts.update(item for item in (value, quote(value, safe=''), '%s=%s' % (key, value))
                             if len(item) >= MIN_SECRET_PART)
        self._parts = sorted(parts, key=len, reverse=True)

    def __call__(self, text):
        text = str(text)
        for part in self._parts:
            text = text.replace(part, '********')
        return text


def existing_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def partial_path(final):
    directory, base = os.path.split(final)
    return os.path.join(directory, '.%s.partial' % base)


def remove_if_present(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------- sources
class UrlSource:
    """Files under a base URL, optionally with a secret query string; resumes with Range requests."""

    kind = 'url'

    def __init__(self, base, query, timeout, validate_certs):
        self.base = base.rstrip('/')
        self.query = (query or '').lstrip('?')
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.scrub = Scrubber(self.query)

    def public_url(self, name):
        """The file's URL without the query string: safe to show."""
        return '%s/%s' % (self.base, quote(name))

    def label(self, name):
        return self.public_url(name)

    def _request_url(self, name):
        return self.public_url(name) + ('?' + self.query if self.query else '')

    def _fail(self, name, reason):
        return FetchError(name, self.public_url(name), self.scrub(reason))

    def _open(self, name, offset):
        headers = {'Accept-Encoding': 'identity'}
        if offset:
            headers['Range'] = 'bytes=%d-' % offset
        try:
            return open_url(self._request_url(name), headers=headers, timeout=self.timeout,
                            validate_certs=self.validate_certs, decompress=False)
        except HTTPError as exc:
            raise self._fail(name, 'HTTP %s %s' % (exc.code, exc.reason)) from None
        except URLError as exc:
            raise self._fail(name, exc.reason) from None
        except (UrlConnectionError, http.client.HTTPException, OSError, ValueError) as exc:
            raise self._fail(name, exc) from None

    def _appends(self, name, response, offset):
        """Whether the answer continues the partial file at ``offset`` (206) or starts it over (200)."""
        status = response.getcode()
        if status == 200:
            return False
        if status == 206:
            match = _CONTENT_RANGE_RE.match(response.headers.get('Content-Range') or '')
            if match and int(match.group(1)) == offset:
                return offset > 0
            raise self._fail(name, 'answered 206 with Content-Range %r, asked for bytes=%d-'
                             % (response.headers.get('Content-Range'), offset))
        raise self._fail(name, 'unexpected HTTP status %s' % status)

    def _copy_body(self, name, response, handle):
        while True:
            try:
                block = response.read(NET_CHUNK)
            except (http.client.HTTPException, OSError, ValueError) as exc:
                raise self._fail(name, exc) from None
            if not block:
                return
            handle.write(block)

    def fetch(self, name, partial, size):
        """Download ``name`` into ``partial``, continuing what it holds; return whether it was resumed."""
        offset = existing_size(partial)
        if offset > size:
            remove_if_present(partial)
            offset = 0
        if offset and offset == size:
            return True
        response = self._open(name, offset)
        try:
            appends = self._appends(name, response, offset)
            with open(partial, 'ab' if appends else 'wb') as handle:
                self._copy_body(name, response, handle)
        finally:
            response.close()
        return appends


class PeerSource:
    """Files of a peer's rsync daemon module; rsync resumes onto the partial file (delta transfer in place)."""

    kind = 'peer'

    def __init__(self, module, peer, port, module_name, timeout):
        self.module = module
        host = '[%s]' % peer if ':' in peer and not peer.startswith('[') else peer
        self.root = 'rsync://%s:%d/%s' % (host, port, module_name.strip('/'))
        self.timeout = timeout
        self._rsync = None

    def label(self, name):
        return '%s/%s' % (self.root, name)

    def fetch(self, name, partial, size):
        """rsync ``name`` into ``partial``; return whether a partial copy was there to continue from."""
        if self._rsync is None:
            self._rsync = self.module.get_bin_path('rsync', required=True)
        resumed = existing_size(partial) > 0
        command = [self._rsync, '--timeout=%d' % self.timeout, '--contimeout=%d' % self.timeout,
                   '-t', '--partial', '--inplace', self.label(name), partial]
        rc, dummy, err = self.module.run_command(command)
        if rc != 0:
            lines = [line.strip() for line in (err or '').splitlines() if line.strip()]
            reason = '; '.join(lines) or 'rsync exited with %d' % rc
            raise FetchError(name, self.root, reason)
        return resumed


def make_source(module):
    params = module.params
    if params['url']:
        return UrlSource(params['url'], params['url_query'], params['timeout'], params['validate_certs'])
    if params['peer']:
        return PeerSource(module, params['peer'], params['peer_port'], params['peer_module'], params['timeout'])
    return None


# ----------------------------------------------------------------- staging
class Stager:
    """Decides what to copy, checks the free space, copies and verifies; keeps the result so far."""

    def __init__(self, path, entries, cache):
        self.path = path
        self.entries = entries
        self.cache = cache
        self.result = dict(changed=False, copied=[], bytes_copied=0, present=0, source=None)

    def final_path(self, name):
        return os.path.join(self.path, *name.split('/'))

    def is_verified(self, name):
        sha, size = self.entries[name]
        final = self.final_path(name)
        if not os.path.isfile(final) or os.path.getsize(final) != size:
            return False
        return hash_with_cache(final, self.cache)[0] == sha

    def plan(self):
        """Names that are missing or wrong, sorted; counts the verified ones in the result."""
        to_copy = []
        for name in sorted(self.entries):
            if self.is_verified(name):
                self.result['present'] += 1
            else:
                to_copy.append(name)
        return to_copy

    def bytes_needed(self, names):
        """Bytes still to write: the sizes, less what partial copies already hold."""
        needed = 0
        for name in names:
            size = self.entries[name][1]
            held = existing_size(partial_path(self.final_path(name)))
            needed += size - held if held <= size else size
        return needed

    def check_free_space(self, names, margin):
        need = self.bytes_needed(names)
        free = free_bytes_at(self.path)
        if free < need + margin:
            raise StageError('%s needs %d bytes free for %d file(s) (+ margin %d), has %d'
                             % (self.path, need, len(names), margin, free))

    def _found(self, partial):
        return sha256_file(partial), os.path.getsize(partial)

    def copy(self, source, name):
        sha, size = self.entries[name]
        final = self.final_path(name)
        partial = partial_path(final)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        resumed = source.fetch(name, partial, size)
        found = self._found(partial)
        if found != (sha, size) and resumed:
            remove_if_present(partial)
            source.fetch(name, partial, size)
            found = self._found(partial)
        if found != (sha, size):
            remove_if_present(partial)
            raise StageError('%s from %s: expected sha256 %s size %d, found sha256 %s size %d'
                             % (name, source.label(name), sha, size, found[0], found[1]))
        os.chmod(partial, 0o644)
        os.replace(partial, final)
        self.cache.put(final, os.stat(final), sha)
        self.result['copied'].append(name)
        self.result['bytes_copied'] += size

    def run(self, source, margin, check_mode):
        to_copy = self.plan()
        if not to_copy:
            return self.result
        if source is None:
            raise StageError('%d file(s) of %s are missing or wrong and neither url nor peer is given: %s'
                             % (len(to_copy), self.path, ', '.join(to_copy)))
        self.check_free_space(to_copy, margin)
        self.result.update(changed=True, source=source.kind)
        if check_mode:
            self.result.update(copied=to_copy, bytes_copied=sum(self.entries[name][1] for name in to_copy))
            return self.result
        for name in to_copy:
            self.copy(source, name)
        return self.result


def run_module(module):
    params = module.params
    scrub = Scrubber((params['url_query'] or '').lstrip('?'))
    try:
        entries = parse_manifest(params['manifest'])
    except ValueError as exc:
        module.fail_json(msg='Invalid manifest for %s: %s [SGLPD-MDL-001]' % (params['path'], exc))
    cache = HashCache(params['cache'] or None)
    stager = Stager(params['path'], entries, cache)
    try:
        result = stager.run(make_source(module), params['free_margin_bytes'], module.check_mode)
    except StageError as exc:
        save_cache(module, cache)
        module.fail_json(msg=f'{scrub(exc)} [SGLPD-MDL-002]', **stager.result)
    except OSError as exc:
        save_cache(module, cache)
        module.fail_json(msg='Cannot stage %s: %s [SGLPD-MDL-003]' % (params['path'], scrub(exc)), **stager.result)
    save_cache(module, cache)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            manifest=dict(type='str', required=True),
            url=dict(type='str'),
            url_query=dict(type='str', no_log=True),
            peer=dict(type='str'),
            peer_port=dict(type='int', default=8730),
            peer_module=dict(type='str', default='model'),
            free_margin_bytes=dict(type='int', default=0),
            cache=dict(type='path', default='/var/cache/sglang-pd/model-hashes.json'),
            timeout=dict(type='int', default=60),
            validate_certs=dict(type='bool', default=True),
        ),
        mutually_exclusive=[('url', 'peer')],
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == '__main__':
    main()
