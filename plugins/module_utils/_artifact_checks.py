# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Manifest, digests, text counts, measuring, evaluation and cache of ``image_artifacts``.

Private helpers, standard library only: nothing here talks to Docker. Files are read through
a *reader* - an object with two methods:

``stat(path)``
    None when ``path`` does not exist in the image, else a dict with name, size, mode,
    link_target (a symlink's target, resolved inside the image) and type (file, directory,
    symlink, other); what ``HEAD /containers/{id}/archive`` reports.
``chunks(path)``
    A context manager that yields an iterator over the bytes of the regular file ``path``
    (bytes-like chunks, each valid until the next one is asked for).

``_image_artifacts.ArchiveReader`` reads through the Docker archive API,
``_image_layers.LayerReader`` straight from the image's overlay2 layer directories.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._atomic_file import write_atomically

# Bump when the cached result format or the meaning of a check changes.
CACHE_SCHEMA = 1
MIN_PREFIX = 8
DIGEST_LENGTHS = {'md5': 32, 'sha256': 64}
READ_CHUNK = 1 << 20

_HEX = re.compile(r'^[0-9a-f]+$')


class ArtifactError(Exception):
    """An error with a message fit for fail_json."""


# --------------------------------------------------------------------------
# Digests and text counts
# --------------------------------------------------------------------------

def new_hash(algorithm):
    """hashlib object; md5 is used for integrity, not security (FIPS hosts)."""
    try:
        return hashlib.new(algorithm, usedforsecurity=False)
    except TypeError:  # pragma: no cover - Python < 3.9
        return hashlib.new(algorithm)


def normalize_digest(value, algorithm, what='value'):
    """Validate an expected digest; return the lower-case hex string.

    A full digest is the norm. A prefix of at least MIN_PREFIX hex characters
    is accepted (the seed records prefixes such as ``84946bbb...``); a
    trailing ``...`` or ``…`` is dropped, and ``sha256:`` may lead a sha256.
    """
    if value is None:
        return None
    full = DIGEST_LENGTHS[algorithm]
    text = str(value).strip().lower()
    if algorithm == 'sha256' and text.startswith('sha256:'):
        text = text[len('sha256:'):]
    text = text.rstrip('.\u2026')
    if not text or not _HEX.match(text) or len(text) > full or len(text) < MIN_PREFIX:
        raise ArtifactError(
            '%s: expected %s %r is not valid: give the full %d hex characters '
            '(or a prefix of at least %d hex characters).'
            % (what, algorithm, value, full, MIN_PREFIX))
    return text


def digest_match(expected, found, algorithm):
    """Return 'full', 'prefix' or 'mismatch'."""
    if not found or not found.startswith(expected):
        return 'mismatch'
    return 'full' if len(expected) == DIGEST_LENGTHS[algorithm] else 'prefix'


class LineMatchCounter:
    """Count lines that contain a fixed byte string, like ``grep -c -F``.

    Fed chunk by chunk; memory stays bounded by the pattern length.
    """

    def __init__(self, pattern):
        self.pattern = pattern
        self.count = 0
        self._carry = b''
        self._matched = False  # the current, unfinished line has a match

    def update(self, data):
        """Count the matches in the next bytes-like chunk ``data``."""
        pat = self.pattern
        # bytes(data) is data itself for bytes; a memoryview is copied (it has no find()).
        buf = self._carry + data if self._carry else bytes(data)
        offset = 0
        end = len(buf)
        while True:
            pos = buf.find(pat, offset)
            if pos == -1:
                break
            if self._matched and buf.rfind(b'\n', offset, pos) != -1:
                self.count += 1
            self._matched = True
            newline = buf.find(b'\n', pos + len(pat))
            if newline == -1:
                offset = end
                break
            self.count += 1
            self._matched = False
            offset = newline + 1
        if self._matched and buf.find(b'\n', offset) != -1:
            self.count += 1
            self._matched = False
        keep = max(offset, end - (len(pat) - 1))
        self._carry = bytes(buf[keep:]) if keep < end else b''

    def finish(self):
        """Count an unfinished last line that matched; return the number of lines."""
        if self._matched:
            self.count += 1
            self._matched = False
        return self.count


# --------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------

def normalize_manifest(artifacts):
    """Validate the manifest and return it in canonical form.

    Raises ArtifactError listing every problem before anything is read.
    """
    problems = []
    result = []
    for index, item in enumerate(artifacts or []):
        path = item.get('path')
        where = path or 'artifacts[%d]' % index
        if not path or not str(path).startswith('/'):
            problems.append('%s: path must be an absolute path inside the image.' % where)
            continue
        state = item.get('state') or 'present'
        entry = dict(path=path, state=state, md5=None, sha256=None, text_count=[])
        for algorithm in ('md5', 'sha256'):
            try:
                entry[algorithm] = normalize_digest(item.get(algorithm), algorithm, where)
            except ArtifactError as exc:
                problems.append(str(exc))
        for check in item.get('text_count') or []:
            pattern = check.get('pattern')
            count = check.get('count')
            if not pattern or '\n' in pattern:
                problems.append('%s: text_count pattern must be a non-empty single-line string.' % where)
                continue
            if count is None or int(count) < 0:
                problems.append('%s: text_count count for %r must be 0 or more.' % (where, pattern))
                continue
            entry['text_count'].append(dict(pattern=pattern, count=int(count)))
        if state == 'absent' and (item.get('md5') or item.get('sha256') or entry['text_count']):
            problems.append('%s: state=absent cannot be combined with md5, sha256 or text_count.' % where)
        result.append(entry)
    if problems:
        raise ArtifactError('Invalid artifacts manifest: ' + ' '.join(problems))
    return result


def manifest_hash(manifest, compute_sha256=False):
    """Stable hash of a canonical manifest (part of the cache key)."""
    payload = json.dumps(
        dict(schema=CACHE_SCHEMA, sha256=bool(compute_sha256), artifacts=manifest),
        sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(payload.encode('utf-8')).hexdigest()


# --------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------

class ContentDigest:
    """Size, md5 (and sha256) and ``grep -c -F`` line counts of one file, fed chunk by chunk."""

    def __init__(self, want_sha256=False, patterns=()):
        self.size = 0
        self._md5 = new_hash('md5')
        self._sha256 = new_hash('sha256') if want_sha256 else None
        self._patterns = list(patterns)
        self._counters = [LineMatchCounter(p.encode('utf-8')) for p in self._patterns]

    def update(self, chunk):
        """Add the next bytes-like ``chunk`` of the file."""
        self.size += len(chunk)
        self._md5.update(chunk)
        if self._sha256 is not None:
            self._sha256.update(chunk)
        for counter in self._counters:
            counter.update(chunk)

    def result(self):
        """Return (size, md5 hex, sha256 hex or None, {pattern: lines})."""
        counts = dict((p, c.finish()) for p, c in zip(self._patterns, self._counters))
        sha256 = self._sha256.hexdigest() if self._sha256 is not None else None
        return self.size, self._md5.hexdigest(), sha256, counts


def _digest_file(reader, path, want_sha256, patterns):
    """Read the regular file ``path`` through ``reader``; return ContentDigest.result()."""
    digest = ContentDigest(want_sha256, patterns)
    with reader.chunks(path) as chunks:
        for chunk in chunks:
            digest.update(chunk)
    return digest.result()


def _follow_symlink(reader, found, stat):
    """Return the stat of the symlink's target (recorded in ``found``), or None when dangling."""
    found['link_target'] = stat['link_target']
    target = reader.stat(stat['link_target']) if stat['link_target'] else None
    if target is None:
        found['type'] = 'dangling symlink'
    return target


def measure_entry(reader, entry, compute_sha256=False):
    """Measure one manifest entry through ``reader``.

    Returns a dict: present, type, link_target, size, md5, sha256 and text_counts
    ({pattern: lines}). A symlink is followed (the reader resolves its target inside the
    image), as md5sum would. Contents are read only for a regular file expected present.
    """
    found = dict(present=False, type=None, link_target=None, size=None,
                 md5=None, sha256=None, text_counts={})
    stat = reader.stat(entry['path'])
    if stat is not None and stat['type'] == 'symlink':
        stat = _follow_symlink(reader, found, stat)
    if stat is None:
        return found
    found.update(present=True, type=stat['type'], size=stat['size'])
    if stat['type'] == 'file' and entry['state'] == 'present':
        want_sha256 = compute_sha256 or entry['sha256'] is not None
        patterns = [c['pattern'] for c in entry['text_count']]
        size, md5, sha256, counts = _digest_file(
            reader, found['link_target'] or entry['path'], want_sha256, patterns)
        found.update(size=size, md5=md5, sha256=sha256, text_counts=counts)
    return found


def measure(reader, manifest, compute_sha256=False):
    """Measure every manifest entry through ``reader``; one measure_entry() dict each."""
    return [measure_entry(reader, entry, compute_sha256) for entry in manifest]


# --------------------------------------------------------------------------
# Evaluating
# --------------------------------------------------------------------------

def _short(digest):
    """A digest for a failure sentence ('nothing' when none was found)."""
    return digest if digest else 'nothing'


def evaluate(manifest, measured):
    """Compare measurements with the manifest.

    Returns (artifact results, failure sentences).
    """
    artifacts = []
    failures = []
    for entry, found in zip(manifest, measured):
        path = entry['path']
        problems = []
        match = None
        text_counts = []
        if entry['state'] == 'absent':
            if found['present']:
                match = 'unexpected'
                problems.append('%s: expected absent, found a %s%s in the image.' % (
                    path, found['type'],
                    ' of %d bytes' % found['size'] if found['type'] == 'file' else ''))
            else:
                match = 'removed'
        elif not found['present']:
            match = 'absent'
            what = ('a dangling symlink to %s' % found['link_target']
                    if found['type'] == 'dangling symlink' else 'no such file')
            expected = ['md5 %s' % entry['md5']] if entry['md5'] else []
            expected += ['sha256 %s' % entry['sha256']] if entry['sha256'] else []
            problems.append('%s: expected present%s, found %s in the image.' % (
                path, ' with ' + ' and '.join(expected) if expected else '', what))
        else:
            needs_file = entry['md5'] or entry['sha256'] or entry['text_count']
            if needs_file and found['type'] != 'file':
                match = 'not_file'
                problems.append('%s: expected a regular file (to check %s), found a %s.' % (
                    path, ', '.join(
                        [a for a in ('md5', 'sha256') if entry[a]]
                        + (['text counts'] if entry['text_count'] else [])),
                    found['type']))
            else:
                matches = []
                for algorithm in ('md5', 'sha256'):
                    expected = entry[algorithm]
                    if not expected:
                        continue
                    result = digest_match(expected, found[algorithm], algorithm)
                    matches.append(result)
                    if result == 'mismatch':
                        problems.append('%s: %s expected %s%s, found %s.' % (
                            path, algorithm,
                            'prefix ' if len(expected) < DIGEST_LENGTHS[algorithm] else '',
                            expected, _short(found[algorithm])))
                for check in entry['text_count']:
                    lines = found['text_counts'].get(check['pattern'])
                    ok = lines == check['count']
                    text_counts.append(dict(pattern=check['pattern'], expected=check['count'],
                                            found=lines, ok=ok))
                    if not ok:
                        problems.append('%s: lines containing %r expected %d, found %s.' % (
                            path, check['pattern'], check['count'], lines))
                if 'mismatch' in matches:
                    match = 'mismatch'
                elif 'prefix' in matches:
                    match = 'prefix'
                elif matches:
                    match = 'full'
                else:
                    match = 'present'
        failures.extend(problems)
        artifacts.append(dict(
            path=path,
            state=entry['state'],
            present=found['present'],
            type=found['type'],
            link_target=found['link_target'],
            size=found['size'],
            md5=found['md5'],
            sha256=found['sha256'],
            expected_md5=entry['md5'],
            expected_sha256=entry['sha256'],
            match=match,
            text_counts=text_counts,
            ok=not problems,
        ))
    return artifacts, failures


# --------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------

def cache_path(cache_dir, image_id, key):
    """The cache file of (image ``image_id``, manifest hash ``key``) under ``cache_dir``."""
    return os.path.join(cache_dir, '%s-%s.json' % (image_id.split(':')[-1], key[:40]))


def read_cache(path, image_id, key):
    """Return cached measurements, or None when absent or unusable."""
    try:
        with open(path, 'r', encoding='utf-8') as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if (not isinstance(data, dict) or data.get('schema') != CACHE_SCHEMA
            or data.get('image_id') != image_id or data.get('manifest_hash') != key
            or not isinstance(data.get('measured'), list)):
        return None
    return data['measured']


def write_cache(path, image_id, key, measured):
    """Write the cache file atomically; return a warning string on failure."""
    record = dict(schema=CACHE_SCHEMA, image_id=image_id, manifest_hash=key, written=int(time.time()), measured=measured)
    try:
        write_atomically(path, json.dumps(record, sort_keys=True), 0o644)
    except OSError as exc:
        return 'Could not write the verification cache %s: %s' % (path, exc)
    return None
