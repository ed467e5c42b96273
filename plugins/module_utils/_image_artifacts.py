# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Read and check files inside local Docker images without starting a container.

Private helpers for the ``image_artifacts`` and ``image_overlay_commit`` modules.

How a file is read: a container is *created* from the image (never started),
``HEAD /containers/{id}/archive`` gives the path's stat, ``GET
/containers/{id}/archive`` streams a tar of it, and the file is hashed while
the tar streams. The container is removed in ``finally``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import queue
import re
import tarfile
import tempfile
import threading
import time
import traceback
import uuid

try:
    import docker
    from docker.errors import DockerException, NotFound
    from docker.utils import decode_json_header
    HAS_DOCKER = True
    DOCKER_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported through missing_required_lib
    HAS_DOCKER = False
    DOCKER_IMPORT_ERROR = traceback.format_exc()

    class DockerException(Exception):  # type: ignore[no-redef]
        """Stand-in so that except clauses stay valid without the SDK."""

    class NotFound(DockerException):  # type: ignore[no-redef]
        """Stand-in for docker.errors.NotFound."""

# Bump when the cached result format or the meaning of a check changes.
CACHE_SCHEMA = 1
MIN_PREFIX = 8
DIGEST_LENGTHS = {'md5': 32, 'sha256': 64}
READ_CHUNK = 1 << 20
# Docker answers with HTTP chunked encoding in ~32 KiB pieces; urllib3 is fastest when
# asked for pieces of that size (large reads cost more than they save).
NET_CHUNK = 32 * 1024
PREFETCH_BLOCKS = 16
LABEL_TRANSIENT = 'org.mindverse.sglang_pd.transient'
# Docker refuses to create a container from an image that has neither CMD nor
# ENTRYPOINT. The command is never run: the container is only created.
PLACEHOLDER_COMMAND = ['/bin/sh']

# Go's os.FileMode type bits, as found in the archive stat header.
_GO_MODE_DIR = 1 << 31
_GO_MODE_SYMLINK = 1 << 27
_GO_MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)

_HEX = re.compile(r'^[0-9a-f]+$')


class ArtifactError(Exception):
    """An error with a message fit for fail_json."""


# --------------------------------------------------------------------------
# Docker client and transient containers
# --------------------------------------------------------------------------

def docker_client(docker_host=None, timeout=300):
    """Return a docker SDK client for ``docker_host`` (or the environment)."""
    try:
        if docker_host:
            return docker.DockerClient(base_url=docker_host, timeout=timeout)
        return docker.from_env(timeout=timeout)
    except DockerException as exc:
        raise ArtifactError(
            'Cannot talk to the Docker daemon at %s: %s. Start dockerd or set docker_host.'
            % (docker_host or os.environ.get('DOCKER_HOST') or 'the default socket', exc))


def get_local_image(client, image):
    """Return the local image ``image`` (name, name:tag or ID), or None."""
    try:
        return client.images.get(image)
    except NotFound:  # ImageNotFound is a NotFound
        return None


def needs_placeholder_command(image):
    """True when Docker would refuse to create a container without a command."""
    config = image.attrs.get('Config') or {}
    return not config.get('Cmd') and not config.get('Entrypoint')


def create_transient_container(client, image, command=None, for_commit=False):
    """Create (never start) a container from ``image`` and return its ID.

    ``command`` is only used when the image has neither CMD nor ENTRYPOINT;
    nothing is ever run. A container that will be committed gets no label
    (Docker would copy it into the image), only a recognisable name.
    """
    kwargs = dict(image=image.id)
    if for_commit:
        kwargs['name'] = 'sglang-pd-build-%s' % uuid.uuid4().hex[:12]
    else:
        kwargs.update(labels={LABEL_TRANSIENT: 'true'}, network_disabled=True)
    if command is not None:
        kwargs['command'] = command
    elif needs_placeholder_command(image):
        kwargs['command'] = PLACEHOLDER_COMMAND
    created = client.api.create_container(**kwargs)
    return created['Id']


def remove_container(client, container_id):
    """Remove a container; errors are returned, not raised (used in finally)."""
    if not container_id:
        return None
    try:
        client.api.remove_container(container_id, force=True, v=True)
    except NotFound:
        return None
    except DockerException as exc:
        return 'Could not remove transient container %s: %s' % (container_id[:12], exc)
    return None


def stat_path(client, container_id, path):
    """Stat ``path`` in a container (HEAD on the archive endpoint).

    Returns None when the path does not exist, else a dict with name, size,
    mode (Go FileMode bits), link_target and type (file, directory, symlink,
    other).
    """
    # The SDK has no call for HEAD /containers/{id}/archive; APIClient is a
    # requests session, so use it directly.
    url = client.api._url('/containers/{0}/archive', container_id)
    response = client.api.head(url, params={'path': path})
    if response.status_code == 404:
        return None
    client.api._raise_for_status(response)
    header = response.headers.get('X-Docker-Container-Path-Stat')
    stat = decode_json_header(header) if header else {}
    mode = int(stat.get('mode') or 0)
    if mode & _GO_MODE_DIR:
        kind = 'directory'
    elif mode & _GO_MODE_SYMLINK:
        kind = 'symlink'
    elif mode & _GO_MODE_TYPE:
        kind = 'other'
    else:
        kind = 'file'
    return dict(
        name=stat.get('name'),
        size=int(stat.get('size') or 0),
        mode=mode & 0o777,
        link_target=stat.get('linkTarget') or None,
        type=kind,
    )


class ChunkReader(io.RawIOBase):
    """A read-only file object over an iterator of byte chunks."""

    def __init__(self, chunks):
        super().__init__()
        self._chunks = iter(chunks)
        self._buf = memoryview(b'')

    def readable(self):
        return True

    def readinto(self, b):
        while not len(self._buf):
            try:
                self._buf = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


class Prefetcher:
    """Read an iterator of byte chunks in a background thread, in blocks of about READ_CHUNK.

    Receiving from the Docker socket and hashing then overlap (both release the GIL), so a
    file is hashed at about the rate the daemon sends it.
    """

    _END = object()

    def __init__(self, chunks, close=None):
        self._chunks = chunks
        self._close = close
        self._queue = queue.Queue(PREFETCH_BLOCKS)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='image-artifacts-prefetch')
        self._thread.daemon = True
        self._thread.start()

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _run(self):
        try:
            block = []
            size = 0
            for chunk in self._chunks:
                block.append(chunk)
                size += len(chunk)
                if size >= READ_CHUNK:
                    if not self._put(b''.join(block)):
                        return
                    block, size = [], 0
            if block:
                self._put(b''.join(block))
            self._put(self._END)
        except Exception as exc:  # pylint: disable=broad-except
            self._put(exc)

    def __iter__(self):
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, Exception):
                raise item
            yield item

    def close(self):
        self._stop.set()
        self._thread.join(5)
        if self._close is not None and not self._thread.is_alive():
            try:
                self._close()
            except Exception:  # pylint: disable=broad-except
                pass


class ArchiveStream:
    """Context manager: a streaming ``tarfile`` over ``path`` in a container."""

    def __init__(self, client, container_id, path, prefetch=True):
        # get_archive also takes the socket out of timeout mode, which makes the many small
        # reads of a chunked response several times faster.
        chunks, dummy = client.api.get_archive(container_id, path, chunk_size=NET_CHUNK)
        self._prefetch = Prefetcher(chunks, close=chunks.close) if prefetch else None
        source = self._prefetch if prefetch else chunks
        reader = io.BufferedReader(ChunkReader(source), buffer_size=READ_CHUNK)
        self.archive = tarfile.open(fileobj=reader, mode='r|', bufsize=READ_CHUNK)

    def __enter__(self):
        return self.archive

    def __exit__(self, *exc_info):
        try:
            self.archive.close()
        finally:
            if self._prefetch is not None:
                self._prefetch.close()
        return False


def open_archive_stream(client, container_id, path):
    """Return a context manager yielding a streaming ``tarfile`` over ``path``.

    Same request as ``APIClient.get_archive``, read through a prefetch thread.
    """
    return ArchiveStream(client, container_id, path)


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
        pat = self.pattern
        buf = self._carry + data if self._carry else data
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

def _measure_file(client, container_id, path, want_sha256, patterns):
    """Stream one regular file; return (size, md5, sha256, {pattern: lines})."""
    md5 = new_hash('md5')
    sha256 = new_hash('sha256') if want_sha256 else None
    counters = [LineMatchCounter(p.encode('utf-8')) for p in patterns]
    size = 0
    with open_archive_stream(client, container_id, path) as archive:
        member = archive.next()
        if member is None or not member.isreg():
            raise ArtifactError('%s: the archive Docker returned holds no regular file.' % path)
        handle = archive.extractfile(member)
        while True:
            chunk = handle.read(READ_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            md5.update(chunk)
            if sha256 is not None:
                sha256.update(chunk)
            for counter in counters:
                counter.update(chunk)
    counts = dict((p, c.finish()) for p, c in zip(patterns, counters))
    return size, md5.hexdigest(), sha256.hexdigest() if sha256 else None, counts


def measure(client, container_id, manifest, compute_sha256=False):
    """Measure every manifest path in a created container.

    Returns one dict per manifest entry: present, type, link_target, size,
    md5, sha256 and text_counts ({pattern: lines}). Symlinks are followed
    (Docker resolves the target inside the image), as md5sum would.
    """
    results = []
    for entry in manifest:
        found = dict(present=False, type=None, link_target=None, size=None,
                     md5=None, sha256=None, text_counts={})
        stat = stat_path(client, container_id, entry['path'])
        if stat is not None and stat['type'] == 'symlink':
            found['link_target'] = stat['link_target']
            stat = stat_path(client, container_id, stat['link_target']) if stat['link_target'] else None
            if stat is None:
                found['type'] = 'dangling symlink'
        if stat is not None:
            found['present'] = True
            found['type'] = stat['type']
            found['size'] = stat['size']
            wants_content = entry['state'] == 'present'
            if stat['type'] == 'file' and wants_content:
                real_path = found['link_target'] or entry['path']
                want_sha = compute_sha256 or entry['sha256'] is not None
                patterns = [c['pattern'] for c in entry['text_count']]
                size, md5, sha256, counts = _measure_file(
                    client, container_id, real_path, want_sha, patterns)
                found.update(size=size, md5=md5, sha256=sha256, text_counts=counts)
        results.append(found)
    return results


# --------------------------------------------------------------------------
# Evaluating
# --------------------------------------------------------------------------

def _short(digest):
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
    directory = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix='.artifacts-', suffix='.json', dir=directory)
        with os.fdopen(fd, 'w', encoding='utf-8') as handle:
            json.dump(dict(schema=CACHE_SCHEMA, image_id=image_id, manifest_hash=key,
                           written=int(time.time()), measured=measured),
                      handle, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        return 'Could not write the verification cache %s: %s' % (path, exc)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return None


# --------------------------------------------------------------------------
# Module entry
# --------------------------------------------------------------------------

def verify_image(client, image, manifest, cache_dir=None, use_cache=True,
                 write=True, compute_sha256=False):
    """Verify ``manifest`` against local ``image``.

    Returns a dict with image_id, passed, artifacts, failures, cached,
    cache_path and warnings.
    """
    found_image = get_local_image(client, image)
    if found_image is None:
        raise ArtifactError('Image %s is not present on this Docker host; pull it first '
                            '(community.docker.docker_image_pull).' % image)
    image_id = found_image.id
    key = manifest_hash(manifest, compute_sha256)
    path = cache_path(cache_dir, image_id, key) if cache_dir else None
    warnings = []
    measured = None
    cached = False
    if path and use_cache:
        measured = read_cache(path, image_id, key)
        cached = measured is not None
    if measured is None:
        container_id = None
        try:
            container_id = create_transient_container(client, found_image)
            measured = measure(client, container_id, manifest, compute_sha256)
        finally:
            problem = remove_container(client, container_id)
            if problem:
                warnings.append(problem)
        if path and write:
            problem = write_cache(path, image_id, key, measured)
            if problem:
                warnings.append(problem)
    artifacts, failures = evaluate(manifest, measured)
    return dict(
        image_id=image_id,
        passed=not failures,
        artifacts=artifacts,
        failures=failures,
        cached=cached,
        cache_path=path,
        warnings=warnings,
    )
