# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Inspect images on a local Docker daemon and read their files straight from the overlay2 layers.

Private helpers of the ``image_artifacts`` module, standard library only: a cached
verification never imports the Docker SDK.

``LocalDaemon`` asks a daemon on a unix socket for an image's inspect data, one HTTP request.

With the overlay2 storage driver an image's layers are plain directories on the daemon's host:
``GraphDriver.Data.UpperDir`` is the top layer and ``LowerDir`` the layers below it, upper-most
first, colon-separated. ``LayerReader`` finds a path the way overlayfs merges them - the first
layer that has the name wins; a character device 0/0 there (a whiteout) means deleted; a
directory merges with the same directory in the layers below unless it carries the
``trusted.overlay.opaque=y`` xattr (``user.overlay.opaque`` for a daemon with ``userxattr``) -
and resolves symlinks inside the image root exactly as Docker's archive API does
(``container.ResolvePath`` / ``StatPath`` and ``symlink.FollowSymlinkInScope``), so both ways of
reading report the same thing. Files are then read with large reads, no tar, no container.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import os
import posixpath
import socket
import stat as stat_module
from urllib.parse import quote

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._artifact_checks import ArtifactError
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._model_weights import advise_sequential

DEFAULT_DOCKER_HOST = 'unix:///var/run/docker.sock'
UNIX_SCHEMES = ('unix://', 'http+unix://')
OPAQUE_XATTRS = ('trusted.overlay.opaque', 'user.overlay.opaque')
# Reading trusted.* xattrs takes CAP_SYS_ADMIN; without it an opaque directory looks plain.
CAP_SYS_ADMIN = 21
# FollowSymlinkInScope gives up after this many path elements (symlink targets included).
MAX_WALK_STEPS = 255
READ_BUFFER = 4 * 1024 * 1024

# What is at a path of the merged image: kind is directory, file, symlink, other or missing;
# paths are the host paths (every layer's directory, upper-most first, for a directory);
# lstat is the os.lstat() of the first of them.
Entry = collections.namedtuple('Entry', 'kind paths lstat')
MISSING = Entry('missing', (), None)


class LayersUnavailable(Exception):
    """The image's layer directories cannot be read here; the message says why."""


# --------------------------------------------------------------------------
# The daemon's unix socket
# --------------------------------------------------------------------------

def local_socket_path(docker_host=None):
    """The unix socket of ``docker_host`` (else DOCKER_HOST, else the default), or None if not a socket."""
    host = docker_host or os.environ.get('DOCKER_HOST') or DEFAULT_DOCKER_HOST
    for scheme in UNIX_SCHEMES:
        if host.startswith(scheme):
            return host[len(scheme):]
    return None


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection over a unix socket."""

    def __init__(self, socket_path, timeout):
        super().__init__('localhost', timeout=timeout)
        self.socket_path = socket_path

    def connect(self):
        """Connect to the unix socket instead of a TCP port."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class LocalDaemon:
    """A Docker daemon on a unix socket of this host, asked through plain HTTP (no SDK)."""

    def __init__(self, socket_path, timeout=300):
        self.socket_path = socket_path
        self.timeout = timeout

    def _get(self, path):
        """GET ``path`` from the daemon; return (status, body bytes)."""
        connection = UnixHTTPConnection(self.socket_path, self.timeout)
        try:
            connection.request('GET', path)
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ArtifactError(
                'Cannot talk to the Docker daemon at unix://%s: %s. Start dockerd or set docker_host.'
                % (self.socket_path, exc))
        finally:
            connection.close()

    def inspect_image(self, image):
        """Return ``docker image inspect`` of the local image ``image`` as a dict, or None when absent."""
        status, body = self._get('/images/%s/json' % quote(image, safe='/:'))
        if status == 404:
            return None
        if status != 200:
            raise ArtifactError('Docker answered %d to the inspection of image %s: %s'
                                % (status, image, _docker_message(body)))
        return json.loads(body.decode('utf-8'))


def _docker_message(body):
    """The ``message`` of a Docker error body, else the body itself."""
    text = body.decode('utf-8', 'replace').strip()
    try:
        return json.loads(text).get('message') or text
    except (ValueError, AttributeError):
        return text


# --------------------------------------------------------------------------
# Layer directories
# --------------------------------------------------------------------------

def has_cap_sys_admin():
    """Whether this process has CAP_SYS_ADMIN (needed to see trusted.overlay.* xattrs)."""
    try:
        with open('/proc/self/status', 'r', encoding='ascii') as handle:
            for line in handle:
                if line.startswith('CapEff:'):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def image_layer_dirs(attrs):
    """The layer directories of an inspected image, upper-most first.

    Raises LayersUnavailable when the image is not stored by overlay2 or the directories
    cannot be read by this process (not root, or the daemon lives in another mount namespace).
    """
    driver = attrs.get('GraphDriver') or {}
    if driver.get('Name') != 'overlay2':
        raise LayersUnavailable('the storage driver is %s, not overlay2' % driver.get('Name'))
    data = driver.get('Data') or {}
    if not data.get('UpperDir'):
        raise LayersUnavailable('the image inspection names no UpperDir')
    dirs = [data['UpperDir']] + [d for d in (data.get('LowerDir') or '').split(':') if d]
    if not has_cap_sys_admin():
        raise LayersUnavailable('this process lacks CAP_SYS_ADMIN and cannot see opaque directories')
    for directory in dirs:
        if not os.path.isdir(directory) or not os.access(directory, os.R_OK | os.X_OK):
            raise LayersUnavailable('the layer directory %s cannot be read here' % directory)
    return dirs


def _lstat_or_none(host_path):
    """os.lstat of a layer entry, or None when the layer does not have it."""
    try:
        return os.lstat(host_path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LayersUnavailable('cannot read %s: %s' % (host_path, exc))


def _is_whiteout(lstat):
    """Whether a layer entry is an overlay whiteout (a character device 0/0)."""
    return stat_module.S_ISCHR(lstat.st_mode) and lstat.st_rdev == 0


def _is_opaque(directory):
    """Whether a layer directory hides the same directory in the layers below it."""
    for name in OPAQUE_XATTRS:
        try:
            if os.getxattr(directory, name, follow_symlinks=False) == b'y':
                return True
        except OSError:
            continue
    return False


def _kind(lstat):
    """file, directory, symlink or other, as the archive path names them."""
    if stat_module.S_ISDIR(lstat.st_mode):
        return 'directory'
    if stat_module.S_ISLNK(lstat.st_mode):
        return 'symlink'
    if stat_module.S_ISREG(lstat.st_mode):
        return 'file'
    return 'other'


# --------------------------------------------------------------------------
# Docker's path rules (github.com/docker/docker container/archive.go, pkg/archive)
# --------------------------------------------------------------------------

def docker_abs_path(path):
    """``path`` cleaned as ResolvePath does: absolute, no ``..``, a trailing ``/`` or ``/.`` kept."""
    cleaned = posixpath.normpath('/' + path.lstrip('/'))
    if _go_base(path) == '.' and _go_base(cleaned) != '.':
        cleaned = cleaned.rstrip('/') + '/.'
    if path.endswith('/') and not cleaned.endswith('/'):
        cleaned += '/'
    return cleaned


def _go_base(path):
    """Go's filepath.Base: the last element, trailing slashes ignored; '/' for the root."""
    stripped = path.rstrip('/')
    if not stripped:
        return '/' if path else '.'
    return stripped.rsplit('/', 1)[-1]


# --------------------------------------------------------------------------
# Reading from the layers
# --------------------------------------------------------------------------

class LayerReader:
    """The reader of _artifact_checks over an image's overlay2 layer directories.

    ``stat`` and ``chunks`` answer as ``_image_artifacts.ArchiveReader`` does for a container
    created from the image. ArtifactError is raised where Docker answers with an error (a path
    through a non-directory, a symlink loop); LayersUnavailable when the layers cannot be read.
    """

    def __init__(self, layer_dirs, buffer_size=READ_BUFFER):
        try:
            root_lstat = os.lstat(layer_dirs[0])
        except OSError as exc:
            raise LayersUnavailable('cannot read %s: %s' % (layer_dirs[0], exc))
        self.root = Entry('directory', tuple(layer_dirs), root_lstat)
        self._buffer = bytearray(buffer_size)

    def _child(self, parent, name, path):
        """What the merged image holds at ``name`` inside ``parent`` (an Entry)."""
        if parent.kind == 'missing':
            return MISSING
        if parent.kind != 'directory':
            raise ArtifactError('%s: a path element of it is not a directory in the image.' % path)
        found = []
        for directory in parent.paths:
            host_path = os.path.join(directory, name)
            lstat = _lstat_or_none(host_path)
            if lstat is None:
                continue
            is_directory = stat_module.S_ISDIR(lstat.st_mode)
            # A whiteout deletes the name for the layers below; under a directory of an upper
            # layer, a non-directory of a lower one is hidden.
            if _is_whiteout(lstat) or (found and not is_directory):
                break
            found.append((host_path, lstat))
            # A non-directory hides the layers below; so does an opaque directory.
            if not is_directory or _is_opaque(host_path):
                break
        if not found:
            return MISSING
        return Entry(_kind(found[0][1]), tuple(p for p, dummy in found), found[0][1])

    def _readlink(self, entry):
        """The target of a symlink entry."""
        try:
            return os.readlink(entry.paths[0])
        except OSError as exc:
            raise LayersUnavailable('cannot read the symlink %s: %s' % (entry.paths[0], exc))

    def walk(self, path):
        """Follow every symlink of ``path`` inside the image root, as FollowSymlinkInScope does.

        Returns (elements, entry): the resolved path's elements and what is there (MISSING
        when it does not exist; like Docker, a missing element is kept as it is).
        """
        remaining = posixpath.normpath('/' + path.lstrip('/'))
        names, entries = [], [self.root]
        steps = 0
        while remaining:
            if steps > MAX_WALK_STEPS:
                raise ArtifactError('%s: too many levels of symbolic links in the image.' % path)
            steps += 1
            name, dummy, remaining = remaining.partition('/')
            if name in ('', '.'):
                continue
            if name == '..':
                if names:
                    names.pop()
                    entries.pop()
                continue
            entry = self._child(entries[-1], name, path)
            if entry.kind == 'symlink':
                target = self._readlink(entry)
                if target.startswith('/'):
                    names, entries = [], [self.root]
                remaining = target + '/' + remaining
                continue
            names.append(name)
            entries.append(entry)
        return names, entries[-1]

    def _resolve_path(self, abs_path):
        """The entry at ``abs_path`` as ResolvePath + Lstat see it: the last element not followed."""
        directory, base = abs_path.rsplit('/', 1)
        dummy, parent = self.walk(directory or '/')
        if base not in ('', '.'):
            return self._child(parent, base, abs_path)
        # A trailing '/' or '/.': lstat("dir/") - a directory, or ENOTDIR.
        if parent.kind not in ('directory', 'missing'):
            raise ArtifactError('%s: a path element of it is not a directory in the image.' % abs_path)
        return parent

    def stat(self, path):
        """Stat ``path`` as HEAD /containers/{id}/archive does; None when it does not exist."""
        abs_path = docker_abs_path(path)
        entry = self._resolve_path(abs_path)
        if entry.kind == 'missing':
            return None
        link_target = None
        if entry.kind == 'symlink':
            names, dummy = self.walk(abs_path)
            link_target = '/' + '/'.join(names)
        return dict(
            name=_go_base(abs_path),
            size=entry.lstat.st_size,
            mode=entry.lstat.st_mode & 0o777,
            link_target=link_target,
            type=entry.kind,
        )

    @contextlib.contextmanager
    def chunks(self, path):
        """Yield an iterator over the bytes of the regular file ``path`` (symlinks followed)."""
        dummy, entry = self.walk(docker_abs_path(path))
        if entry.kind != 'file':
            raise ArtifactError('%s: the image holds no regular file there.' % path)
        try:
            handle = open(entry.paths[0], 'rb', buffering=0)
        except OSError as exc:
            raise LayersUnavailable('cannot open %s: %s' % (entry.paths[0], exc))
        with handle:
            advise_sequential(handle.fileno())
            yield self._blocks(handle)

    def _blocks(self, handle):
        """Read ``handle`` into the reader's buffer; yield a view of each block."""
        view = memoryview(self._buffer)
        while True:
            try:
                count = handle.readinto(self._buffer)
            except OSError as exc:
                raise LayersUnavailable('cannot read %s: %s' % (handle.name, exc))
            if not count:
                return
            yield view[:count]
