# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Read files inside local Docker images through the Docker SDK, without starting a container.

Private helpers for the ``image_overlay_commit`` module and the archive path of
``image_artifacts`` (``_image_verify`` imports this module only when it needs the archive API;
the checks themselves live in ``_artifact_checks``).

How a file is read: a container is *created* from the image (never started),
``HEAD /containers/{id}/archive`` gives the path's stat, ``GET
/containers/{id}/archive`` streams a tar of it, and the file is hashed while
the tar streams. The container is removed in ``finally``.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import tarfile
import threading
import traceback
import uuid

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._artifact_checks import (
    READ_CHUNK,
    ArtifactError,
    measure,
)

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
# Measuring through the archive API
# --------------------------------------------------------------------------

class ArchiveReader:
    """The reader of _artifact_checks over a created container, through the archive API."""

    def __init__(self, client, container_id):
        self.client = client
        self.container_id = container_id

    def stat(self, path):
        """Stat ``path`` in the container (see stat_path); None when it does not exist."""
        return stat_path(self.client, self.container_id, path)

    @contextlib.contextmanager
    def chunks(self, path):
        """Yield an iterator over the bytes of the regular file ``path``, streamed as a tar."""
        with open_archive_stream(self.client, self.container_id, path) as archive:
            member = archive.next()
            if member is None or not member.isreg():
                raise ArtifactError('%s: the archive Docker returned holds no regular file.' % path)
            handle = archive.extractfile(member)
            yield iter(lambda: handle.read(READ_CHUNK), b'')


def measure_via_archive(client, image, manifest, compute_sha256=False):
    """Measure ``manifest`` in a container created (never started) from ``image``.

    Returns (measured, warnings); the container is removed whatever happens.
    """
    warnings = []
    container_id = None
    try:
        container_id = create_transient_container(client, image)
        measured = measure(ArchiveReader(client, container_id), manifest, compute_sha256)
    finally:
        problem = remove_container(client, container_id)
        if problem:
            warnings.append(problem)
    return measured, warnings
