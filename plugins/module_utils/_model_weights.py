# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Check model directories in the SGLang / Hugging Face layout (private: the API may change).

Pure Python (standard library only), shared by the ``model_weights`` and ``model_stage`` modules.

A model directory holds ``config.json``, a tokenizer (``tokenizer.json`` or ``tokenizer.model``,
plus ``tokenizer_config.json``) and safetensors weights: either ``model.safetensors.index.json``,
whose ``weight_map`` values name the shard files, or one ``model.safetensors``.

A safetensors file is an 8-byte little-endian length N, N bytes of JSON header (tensor name ->
``{dtype, shape, data_offsets: [begin, end]}``, plus an optional ``__metadata__``), then the data.
Its expected size is therefore 8 + N + the largest ``end``, which catches truncated shards without
reading (or hashing) them.

A manifest names every file with its sha256 and size, one ``SHA256  SIZE  NAME`` line each.
Hashes are cached per absolute path, keyed by size and mtime, so that a re-run only hashes files
that changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._atomic_file import write_atomically

CHUNK = 8 * 1024 * 1024
DEFAULT_CACHE_PATH = '/var/cache/sglang-pd/model-hashes.json'
CONFIG_NAME = 'config.json'
TOKENIZER_NAMES = ('tokenizer.json', 'tokenizer.model')
TOKENIZER_CONFIG_NAME = 'tokenizer_config.json'
INDEX_NAME = 'model.safetensors.index.json'
SINGLE_WEIGHTS_NAME = 'model.safetensors'
# The safetensors library refuses headers larger than 100 MB; so does this reader.
MAX_HEADER_BYTES = 100 * 1000 * 1000
HEADER_LENGTH_BYTES = 8

_SHA256_RE = re.compile(r'^[0-9a-fA-F]{64}$')


# ----------------------------------------------------------------- manifest
def unsafe_name_reason(name):
    """Why ``name`` cannot name a file inside a model directory, or None when it can."""
    if not name:
        return 'the name is empty'
    if name.startswith('/'):
        return 'the name %s is absolute' % name
    if '..' in name.split('/'):
        return 'the name %s contains ..' % name
    return None


def _parse_manifest_line(number, line):
    fields = line.split()
    if len(fields) != 3:
        raise ValueError('manifest line %d: expected "SHA256  SIZE  NAME" (3 fields), found %d field(s)'
                         % (number, len(fields)))
    sha, size, name = fields
    if not _SHA256_RE.match(sha):
        raise ValueError('manifest line %d: the sha256 must be 64 hex digits, found %r' % (number, sha))
    if not size.isdigit():
        raise ValueError('manifest line %d: the size must be a whole number of bytes, found %r' % (number, size))
    reason = unsafe_name_reason(name)
    if reason:
        raise ValueError('manifest line %d: %s' % (number, reason))
    return name, (sha.lower(), int(size))


def parse_manifest(text):
    """Parse manifest text into {name: (sha256 hex, size)}.

    One ``SHA256  SIZE  NAME`` line per file (any whitespace between the fields; a name holds
    no whitespace). Blank lines and lines starting with ``#`` are ignored. A malformed line
    raises ValueError naming its line number.
    """
    entries = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith('#'):
            continue
        name, entry = _parse_manifest_line(number, line)
        if name in entries:
            raise ValueError('manifest line %d: %s is listed twice' % (number, name))
        entries[name] = entry
    return entries


def format_manifest(entries):
    """Manifest text of {name: (sha256 hex, size)}, one line per file, sorted by name."""
    return ''.join('%s  %d  %s\n' % (entries[name][0], entries[name][1], name) for name in sorted(entries))


# ----------------------------------------------------------------- safetensors
def _read_safetensors_header(handle):
    head = handle.read(HEADER_LENGTH_BYTES)
    if len(head) < HEADER_LENGTH_BYTES:
        raise ValueError('the file is %d bytes long, shorter than the 8-byte header length' % len(head))
    (length,) = struct.unpack('<Q', head)
    if length > MAX_HEADER_BYTES:
        raise ValueError('the header length field says %d bytes (more than %d): not a safetensors file'
                         % (length, MAX_HEADER_BYTES))
    raw = handle.read(length)
    if len(raw) < length:
        raise ValueError('the header length field says %d bytes, the file ends after %d' % (length, len(raw)))
    try:
        header = json.loads(raw.decode('utf-8'))
    except ValueError as exc:  # UnicodeDecodeError and json.JSONDecodeError are ValueErrors
        raise ValueError('the header is not valid JSON (%s)' % exc) from None
    if not isinstance(header, dict):
        raise ValueError('the header is JSON but not an object')
    return length, header


def _data_end(tensor_name, info):
    offsets = info.get('data_offsets') if isinstance(info, dict) else None
    valid = (isinstance(offsets, list) and len(offsets) == 2
             and all(isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in offsets)
             and offsets[0] <= offsets[1])
    if not valid:
        raise ValueError('tensor %s has no valid data_offsets [begin, end] in the header' % tensor_name)
    return offsets[1]


def safetensors_expected_size(path):
    """Size in bytes the safetensors file at ``path`` must have according to its own header.

    8 + header length + the largest end of the tensors' data_offsets (0 without tensors).
    Raises ValueError with the reason when the header cannot be read or makes no sense.
    """
    with open(path, 'rb') as handle:
        length, header = _read_safetensors_header(handle)
    data_end = 0
    for tensor_name, info in header.items():
        if tensor_name != '__metadata__':
            data_end = max(data_end, _data_end(tensor_name, info))
    return HEADER_LENGTH_BYTES + length + data_end


# ----------------------------------------------------------------- hashing
def advise_sequential(fd):
    """Ask the kernel for larger read-ahead; a hint only, so any refusal is ignored."""
    if hasattr(os, 'posix_fadvise'):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        except OSError:
            pass


def sha256_file(path, chunk=CHUNK):
    """sha256 hex digest of the file at ``path``, read in blocks of ``chunk`` bytes into one reused buffer."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    with open(path, 'rb', buffering=0) as handle:
        advise_sequential(handle.fileno())
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
    return digest.hexdigest()


class HashCache:
    """sha256 of files by absolute path, valid while the file keeps its size and mtime_ns.

    Stored as one JSON object {path: {size, mtime_ns, sha256}} at ``path``. A missing or
    unreadable file is an empty cache. ``HashCache(None)`` is a disabled cache: it never
    answers and never writes.
    """

    def __init__(self, path=DEFAULT_CACHE_PATH):
        self.path = path or None
        self._entries = self._load() if self.path else {}
        self._updated = {}

    @property
    def enabled(self):
        return self.path is not None

    @property
    def changed(self):
        return bool(self._updated)

    def _load(self):
        try:
            with open(self.path, 'r', encoding='utf-8') as handle:
                entries = json.load(handle)
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def get(self, path, stat):
        """The cached sha256 of ``path`` if ``stat`` (an os.stat_result) matches the cached size and mtime_ns."""
        entry = self._entries.get(os.path.abspath(path))
        if not isinstance(entry, dict):
            return None
        sha = entry.get('sha256')
        if (entry.get('size') == stat.st_size and entry.get('mtime_ns') == stat.st_mtime_ns
                and isinstance(sha, str) and _SHA256_RE.match(sha)):
            return sha
        return None

    def put(self, path, stat, sha):
        """Remember ``sha`` for ``path`` as it was when ``stat`` was taken."""
        if not self.enabled:
            return
        key = os.path.abspath(path)
        entry = dict(size=stat.st_size, mtime_ns=stat.st_mtime_ns, sha256=sha)
        if self._entries.get(key) != entry:
            self._entries[key] = entry
            self._updated[key] = entry

    def save(self):
        """Write the cache atomically if anything was put since the last save; return whether it wrote.

        Entries another process saved in the meantime are kept (this run's entries win).
        """
        if not self.enabled or not self._updated:
            return False
        entries = self._load()
        entries.update(self._updated)
        write_atomically(self.path, json.dumps(entries, sort_keys=True, separators=(',', ':')), 0o644)
        self._entries = entries
        self._updated = {}
        return True


def hash_with_cache(path, cache=None):
    """Return (sha256 hex, was_cached) of the file at ``path``; hash it only when the cache has no valid entry."""
    stat = os.stat(path)
    if cache is not None:
        sha = cache.get(path, stat)
        if sha:
            return sha, True
    sha = sha256_file(path)
    if cache is not None:
        cache.put(path, stat, sha)
    return sha, False


# ----------------------------------------------------------------- directory checks
class _DirCheck:
    """Collects what verify_dir found: one problem per file at most, and the files it looked at."""

    def __init__(self, model_dir, cache):
        self.model_dir = model_dir
        self.cache = cache
        self.problems = []
        self._problem_files = set()
        self._sizes = {}
        self.hashed_bytes = 0
        self.cached_files = 0

    def problem(self, name, expected, found):
        if name not in self._problem_files:
            self._problem_files.add(name)
            self.problems.append(dict(file=name, expected=expected, found=found))

    def has_problem(self, name):
        return name in self._problem_files

    def size_of(self, name):
        """Size of the regular file ``name`` (counted as checked), or None when it is not there."""
        full = os.path.join(self.model_dir, name)
        if not os.path.isfile(full):
            return None
        if name not in self._sizes:
            self._sizes[name] = os.path.getsize(full)
        return self._sizes[name]

    def require(self, name, alternatives=()):
        """Report ``name`` missing unless it (or one of ``alternatives``) is a regular file."""
        if any(self.size_of(candidate) is not None for candidate in (name,) + tuple(alternatives)):
            return True
        expected = 'present' if not alternatives else 'present (or %s)' % ' or '.join(alternatives)
        self.problem(name, expected, 'missing')
        return False

    def sha256_of(self, name):
        sha, was_cached = hash_with_cache(os.path.join(self.model_dir, name), self.cache)
        if was_cached:
            self.cached_files += 1
        else:
            self.hashed_bytes += self._sizes[name]
        return sha

    def report(self):
        return dict(files=len(self._sizes), bytes=sum(self._sizes.values()), hashed_bytes=self.hashed_bytes,
                    cached_files=self.cached_files, problems=self.problems)


def _shard_names(check):
    """Names of the weight files the directory must hold (from the index, or the single file)."""
    index_path = os.path.join(check.model_dir, INDEX_NAME)
    if check.size_of(INDEX_NAME) is None:
        if check.size_of(SINGLE_WEIGHTS_NAME) is not None:
            return [SINGLE_WEIGHTS_NAME]
        check.problem(INDEX_NAME, 'present (or a single %s)' % SINGLE_WEIGHTS_NAME, 'missing')
        return []
    try:
        with open(index_path, 'r', encoding='utf-8') as handle:
            weight_map = json.load(handle).get('weight_map')
    except (OSError, ValueError, AttributeError) as exc:
        check.problem(INDEX_NAME, 'a JSON object with a weight_map', 'unreadable (%s)' % exc)
        return []
    if not isinstance(weight_map, dict) or not weight_map:
        check.problem(INDEX_NAME, 'a JSON object with a non-empty weight_map', 'no weight_map')
        return []
    names = sorted(set(str(value) for value in weight_map.values()))
    unsafe = [name for name in names if unsafe_name_reason(name)]
    if unsafe:
        check.problem(INDEX_NAME, 'shard names inside the model directory', ', '.join(unsafe))
    return [name for name in names if name not in unsafe]


def _check_shard(check, name):
    size = check.size_of(name)
    if size is None:
        check.problem(name, 'present', 'missing')
        return
    try:
        expected = safetensors_expected_size(os.path.join(check.model_dir, name))
    except (OSError, ValueError) as exc:
        check.problem(name, 'a readable safetensors header', str(exc))
        return
    if size != expected:
        check.problem(name, 'size %d (from its safetensors header)' % expected, 'size %d' % size)


def _check_structure(check):
    check.require(CONFIG_NAME)
    check.require(TOKENIZER_NAMES[0], TOKENIZER_NAMES[1:])
    check.require(TOKENIZER_CONFIG_NAME)
    for name in _shard_names(check):
        _check_shard(check, name)


def _check_manifest_entry(check, name, sha, size):
    found_size = check.size_of(name)
    if found_size is None:
        check.problem(name, 'present', 'missing')
    elif found_size != size:
        check.problem(name, 'size %d' % size, 'size %d' % found_size)
    elif not check.has_problem(name):
        found_sha = check.sha256_of(name)
        if found_sha != sha:
            check.problem(name, 'sha256 %s' % sha, 'sha256 %s' % found_sha)


def verify_dir(model_dir, manifest=None, cache=None):
    """Check the model directory; return dict(files, bytes, hashed_bytes, cached_files, problems).

    Always: config.json, a tokenizer, tokenizer_config.json, the index (or a single
    model.safetensors) and every shard it names, each with the size its safetensors header
    gives. With ``manifest`` ({name: (sha256, size)}) also every listed file, its size and
    (only when the size matches) its sha256. ``problems`` is a list of dict(file, expected,
    found), at most one per file; ``hashed_bytes`` counts bytes read this run, the rest came
    from ``cache`` (a HashCache, or None).
    """
    check = _DirCheck(model_dir, cache)
    if not os.path.isdir(model_dir):
        found = 'missing' if not os.path.exists(model_dir) else 'not a directory'
        check.problem('.', 'a model directory', found)
        return check.report()
    _check_structure(check)
    for name in sorted(manifest or {}):
        sha, size = manifest[name]
        _check_manifest_entry(check, name, sha, size)
    return check.report()


def _regular_files(model_dir):
    """Relative names (with ``/``) of the regular files under ``model_dir``, without dotfiles or dot-directories."""
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(name for name in dirs if not name.startswith('.'))
        relative_root = os.path.relpath(root, model_dir)
        for name in sorted(files):
            if name.startswith('.') or not os.path.isfile(os.path.join(root, name)):
                continue
            yield name if relative_root == '.' else '/'.join(relative_root.split(os.sep) + [name])


def record_manifest(model_dir, cache=None):
    """{name: (sha256, size)} of every regular file under ``model_dir`` (dotfiles and dot-directories skipped)."""
    if not os.path.isdir(model_dir):
        raise ValueError('%s is not a directory' % model_dir)
    entries = {}
    for name in _regular_files(model_dir):
        full = os.path.join(model_dir, name)
        sha, dummy = hash_with_cache(full, cache)
        entries[name] = (sha, os.path.getsize(full))
    return entries


def problems_message(model_dir, problems, limit=10):
    """One line naming the first ``limit`` problems: what each file should be and what it is."""
    parts = ['%s: expected %s, found %s' % (item['file'], item['expected'], item['found']) for item in problems[:limit]]
    if len(problems) > limit:
        parts.append('and %d more' % (len(problems) - limit))
    return '%s: %d problem(s): %s' % (model_dir, len(problems), '; '.join(parts))


def save_cache(module, cache):
    """Write the hash cache unless in check mode; a failure to write is a warning, not an error."""
    if module.check_mode:
        return
    try:
        cache.save()
    except OSError as exc:
        module.warn('Could not write the hash cache %s: %s' % (cache.path, exc))
