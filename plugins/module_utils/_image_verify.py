# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""How ``image_artifacts`` verifies a local image: the cache, else the layers, else the archive API.

Private helper of the ``image_artifacts`` module.

1. The image is inspected - over the daemon's unix socket without the Docker SDK when the daemon
   is local - and its ID names the cache entry. A cache hit ends there: one request on the socket
   and one small file read.
2. On a miss the files are read straight from the image's overlay2 layer directories
   (``_image_layers``) when the daemon is local, uses overlay2 and this process can read them.
3. Otherwise - or with ``read_via='archive'``, or when reading the layers fails part-way - they
   are streamed out of a created container through the archive API (``_image_artifacts``). Only
   then is the Docker SDK imported.

Both ways report the same measurements, so a cache entry does not depend on how it was read.
"""

from __future__ import annotations

import contextlib
import traceback

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._artifact_checks import (
    ArtifactError,
    cache_path,
    evaluate,
    manifest_hash,
    measure,
    read_cache,
    write_cache,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._image_layers import (
    LayerReader,
    LayersUnavailable,
    LocalDaemon,
    image_layer_dirs,
    local_socket_path,
)


class DockerSDKMissing(ArtifactError):
    """The archive API is needed and the Docker SDK cannot be imported; ``details`` is the traceback."""

    def __init__(self, details):
        super().__init__('The Docker SDK for Python (docker) is needed to read this image.')
        self.details = details


class DockerCallError(ArtifactError):
    """The Docker SDK raised; ``details`` is the traceback."""

    def __init__(self, message, details):
        super().__init__(message)
        self.details = details


def import_archive_helpers():
    """The SDK-based helpers (``_image_artifacts``), imported on first need."""
    # Imported here, not at the top: the Docker SDK (requests, urllib3) costs more to import
    # than a whole cached verification.
    # pylint: disable-next=import-outside-toplevel
    from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _image_artifacts
    if not _image_artifacts.HAS_DOCKER:
        raise DockerSDKMissing(_image_artifacts.DOCKER_IMPORT_ERROR)
    return _image_artifacts


@contextlib.contextmanager
def sdk_errors(image):
    """Yield the archive helpers; turn an SDK error into DockerCallError naming ``image``."""
    archive = import_archive_helpers()
    try:
        yield archive
    except archive.DockerException as exc:
        raise DockerCallError('Docker error while verifying %s: %s' % (image, exc), traceback.format_exc())


class ImageDaemon:
    """The Docker daemon that holds the image: its unix socket when local, else the SDK."""

    def __init__(self, docker_host=None, timeout=300):
        self.docker_host = docker_host
        self.timeout = timeout
        self.socket_path = local_socket_path(docker_host)
        self._client = None

    def sdk_client(self, archive):
        """The SDK client, made on first use."""
        if self._client is None:
            self._client = archive.docker_client(self.docker_host, self.timeout)
        return self._client

    def inspect_image(self, image):
        """``docker image inspect`` of ``image`` as a dict, or None when the daemon does not have it."""
        if self.socket_path:
            return LocalDaemon(self.socket_path, self.timeout).inspect_image(image)
        with sdk_errors(image) as archive:
            found = archive.get_local_image(self.sdk_client(archive), image)
            return found.attrs if found is not None else None

    def layer_reader(self, attrs):
        """A LayerReader over the inspected image's layers; LayersUnavailable when there is none."""
        if not self.socket_path:
            raise LayersUnavailable('the Docker daemon is not on a local unix socket')
        return LayerReader(image_layer_dirs(attrs))

    def measure_via_archive(self, attrs, manifest, compute_sha256):
        """Measure through the archive API; return (measured, warnings)."""
        with sdk_errors(attrs['Id']) as archive:
            client = self.sdk_client(archive)
            image = archive.get_local_image(client, attrs['Id'])
            if image is None:
                raise ArtifactError('Image %s disappeared from the Docker host while it was verified.' % attrs['Id'])
            return archive.measure_via_archive(client, image, manifest, compute_sha256)


def measure_image(daemon, attrs, manifest, compute_sha256=False, read_via='auto'):
    """Measure ``manifest`` in the inspected image.

    Returns (measured, 'layers' or 'archive', warnings). With ``read_via='auto'`` the layers are
    tried first and the archive API is the fallback.
    """
    if read_via == 'auto':
        try:
            reader = daemon.layer_reader(attrs)
            return measure(reader, manifest, compute_sha256), 'layers', []
        except LayersUnavailable:
            pass
    measured, warnings = daemon.measure_via_archive(attrs, manifest, compute_sha256)
    return measured, 'archive', warnings


def verify_image(image, manifest, docker_host=None, timeout=300, cache_dir=None, use_cache=True,
                 write=True, compute_sha256=False, read_via='auto'):
    """Verify ``manifest`` (normalised) against the local ``image``.

    Returns a dict with image_id, passed, artifacts, failures, cached, cache_path, read_via
    ('layers', 'archive', or None when the result came from the cache) and warnings.
    """
    daemon = ImageDaemon(docker_host, timeout)
    attrs = daemon.inspect_image(image)
    if attrs is None:
        raise ArtifactError('Image %s is not present on this Docker host; pull it first '
                            '(community.docker.docker_image_pull).' % image)
    image_id = attrs['Id']
    key = manifest_hash(manifest, compute_sha256)
    path = cache_path(cache_dir, image_id, key) if cache_dir else None
    measured = read_cache(path, image_id, key) if path and use_cache else None
    result = dict(image_id=image_id, cached=measured is not None, cache_path=path,
                  read_via=None, warnings=[])
    if measured is None:
        measured, result['read_via'], result['warnings'] = measure_image(
            daemon, attrs, manifest, compute_sha256, read_via)
        problem = write_cache(path, image_id, key, measured) if path and write else None
        if problem:
            result['warnings'].append(problem)
    artifacts, failures = evaluate(manifest, measured)
    result.update(passed=not failures, artifacts=artifacts, failures=failures)
    return result
