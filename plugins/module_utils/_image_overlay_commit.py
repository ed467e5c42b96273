# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Build an image from BASE by replacing whole directories and overlaying files.

Private helpers for the ``image_overlay_commit`` module. No container is ever
started: containers are created, written through the archive API and
committed.

How a whole directory is replaced (so that files present only in BASE are
gone): ``PUT /containers/{id}/archive`` extracts a tar over the container's
file system, and - unless ``noOverwriteDirNonDir`` is set, which the API
leaves off by default - an existing directory is removed when the tar holds a
non-directory at the same path. So two tars are put into the parent
directory: the first holds a placeholder *file* named like the directory
(Docker removes BASE's directory with everything in it), the second holds the
source directory (Docker replaces the placeholder by it). On overlayfs the
committed layer then carries the directory as opaque (``.wh..wh..opq``),
which is exactly a full replacement.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import posixpath
import stat as stat_module
import tarfile
import tempfile

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._artifact_checks import (
    READ_CHUNK,
    ArtifactError,
    new_hash,
    normalize_digest,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._image_artifacts import (
    PLACEHOLDER_COMMAND,
    create_transient_container,
    get_local_image,
    needs_placeholder_command,
    open_archive_stream,
    remove_container,
    stat_path,
)

LABEL_PREFIX = 'org.mindverse.sglang_pd.'
LABEL_BASE = LABEL_PREFIX + 'base'
LABEL_SOURCES = LABEL_PREFIX + 'sources'
LABEL_OVERLAYS = LABEL_PREFIX + 'overlays'
LABEL_INPUTS = LABEL_PREFIX + 'inputs'
# Part of the inputs hash: bump when the recipe's output for the same inputs changes.
RECIPE = 'replace-dirs-then-overlays/2'


class BuildError(ArtifactError):
    """An error with a message fit for fail_json."""


def split_target(target):
    """Split ``repository:tag`` (the tag defaults to ``latest``)."""
    if '@' in target:
        raise BuildError('target %r must be repository:tag, not a digest reference.' % target)
    last = target.rsplit('/', 1)[-1]
    if ':' in last:
        repository, tag = target.rsplit(':', 1)
    else:
        repository, tag = target, 'latest'
    if not repository or not tag:
        raise BuildError('target %r must be repository:tag.' % target)
    return repository, tag


def file_md5(path):
    digest = new_hash('md5')
    with open(path, 'rb') as handle:
        while True:
            chunk = handle.read(READ_CHUNK)
            if not chunk:
                break
            digest.update(chunk)
    return digest.hexdigest()


def parse_mode(value, where):
    if value is None:
        return None
    try:
        mode = int(str(value), 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o7777:
        raise BuildError('%s: mode %r is not an octal file mode such as "0755".' % (where, value))
    return mode


def check_paths(replace_dirs, overlays):
    problems = []
    for item in replace_dirs:
        path = item['path']
        if not path.startswith('/') or posixpath.normpath(path) in ('/', '//'):
            problems.append('replace_dirs: path %r must be an absolute directory below /.' % path)
        if '..' in path.split('/'):
            problems.append('replace_dirs: path %r must not contain "..".' % path)
    for item in overlays:
        dest = item['dest']
        if not dest.startswith('/') or dest.endswith('/') or '..' in dest.split('/'):
            problems.append('overlays: dest %r must be an absolute file path without "..".' % dest)
    if problems:
        raise BuildError(' '.join(problems))


def check_overlays(overlays):
    """Verify every overlay source before anything is built.

    Returns a list of dicts (src, dest, md5 found, expected, mode, size);
    raises BuildError naming every file whose md5 differs or that is missing.
    """
    problems = []
    checked = []
    for item in overlays:
        src, dest = item['src'], item['dest']
        where = 'overlay %s -> %s' % (src, dest)
        try:
            expected = normalize_digest(item['md5'], 'md5', where)
            mode = parse_mode(item.get('mode'), where)
        except ArtifactError as exc:
            problems.append(str(exc))
            continue
        if not os.path.isfile(src):
            problems.append('%s: source file not found on this host (expected md5 %s).' % (where, expected))
            continue
        found = file_md5(src)
        if not found.startswith(expected):
            problems.append('%s: md5 expected %s, found %s.' % (src, expected, found))
            continue
        checked.append(dict(src=src, dest=dest, md5=found, expected_md5=expected, mode=mode,
                            size=os.path.getsize(src)))
    if problems:
        raise BuildError('Overlay check failed before building: ' + ' '.join(problems))
    return checked


def image_summary(image, reference):
    return dict(image=reference, id=image.id, repo_digests=sorted(image.attrs.get('RepoDigests') or []))


def inputs_hash(base, sources, overlays, labels, message):
    """Hash of everything that determines the output image."""
    payload = dict(
        recipe=RECIPE,
        base=base.id,
        replace_dirs=[dict(path=s['path'], source_path=s['source_path'], source=s['id']) for s in sources],
        overlays=[dict(dest=o['dest'], md5=o['md5'], mode=o['mode']) for o in overlays],
        labels=dict(sorted((labels or {}).items())),
        message=message or '',
    )
    text = json.dumps(payload, sort_keys=True, separators=(',', ':'))
    return hashlib.sha256(text.encode('utf-8')).hexdigest()


def build_labels(base_reference, base, sources, overlays, user_labels, digest):
    labels = dict(user_labels or {})
    base_info = image_summary(base, base_reference)
    labels[LABEL_BASE] = json.dumps(base_info, sort_keys=True)
    labels[LABEL_SOURCES] = json.dumps(
        [dict(path=s['path'], source_path=s['source_path'], image=s['image'], id=s['id'],
              repo_digests=s['repo_digests']) for s in sources],
        sort_keys=True)
    labels[LABEL_OVERLAYS] = json.dumps(dict((o['dest'], o['md5']) for o in overlays), sort_keys=True)
    labels[LABEL_INPUTS] = digest
    return labels


class _HashingReader:
    """File object that hashes what is read through it."""

    def __init__(self, handle):
        self._handle = handle
        self.md5 = new_hash('md5')

    def read(self, size=-1):
        data = self._handle.read(size)
        self.md5.update(data)
        return data


def _rename(name, old_root, new_root):
    if name == old_root:
        return new_root
    if name.startswith(old_root + '/'):
        return new_root + name[len(old_root):]
    return None


def export_directory(client, container_id, path, new_name, spool):
    """Copy directory ``path`` of a container into tar file ``spool``.

    Entries are renamed so that the top directory is ``new_name``. Returns a
    dict {relative path: md5} of the regular files and the byte count.
    """
    files = {}
    total = 0
    with open_archive_stream(client, container_id, path) as archive:
        with tarfile.open(fileobj=spool, mode='w', format=tarfile.PAX_FORMAT) as out:
            old_root = None
            for member in archive:
                if old_root is None:
                    old_root = member.name.rstrip('/')
                    if not member.isdir():
                        raise BuildError('%s is not a directory in the source image.' % path)
                name = _rename(member.name.rstrip('/'), old_root, new_name)
                if name is None:
                    raise BuildError('Unexpected entry %r in the archive of %s.' % (member.name, path))
                info = copy.copy(member)
                info.name = name
                if member.islnk():
                    info.linkname = _rename(member.linkname, old_root, new_name) or member.linkname
                if member.isreg():
                    reader = _HashingReader(archive.extractfile(member))
                    out.addfile(info, reader)
                    files[name[len(new_name) + 1:]] = reader.md5.hexdigest()
                    total += member.size
                else:
                    out.addfile(info)
    spool.seek(0)
    return files, total


def placeholder_tar(name):
    """A tar holding one empty regular file ``name`` (see module docstring)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w') as out:
        info = tarfile.TarInfo(name)
        info.size = 0
        info.mode = 0o600
        out.addfile(info, io.BytesIO(b''))
    return buf.getvalue()


def overlay_tar(name, src, mode, spool):
    st = os.stat(src)
    info = tarfile.TarInfo(name)
    info.size = st.st_size
    info.mode = mode
    info.mtime = int(st.st_mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = 'root'
    with open(src, 'rb') as handle:
        with tarfile.open(fileobj=spool, mode='w', format=tarfile.PAX_FORMAT) as out:
            out.addfile(info, handle)
    spool.seek(0)


def _require_directory(client, container_id, path, what):
    found = stat_path(client, container_id, path)
    if found is None or found['type'] != 'directory':
        raise BuildError('%s: %s must be an existing directory in the base image, found %s.' % (
            what, path, 'nothing' if found is None else 'a ' + found['type']))


class OverlayCommit:
    """Desired state first, then the build (only when needed)."""

    def __init__(self, client, params, check_mode=False, tmpdir=None):
        self.client = client
        self.params = params
        self.check_mode = check_mode
        self.tmpdir = tmpdir
        self.warnings = []

    def _resolve(self, reference, what):
        image = get_local_image(self.client, reference)
        if image is None:
            raise BuildError('%s image %s is not present on this Docker host; pull it first '
                             '(community.docker.docker_image_pull).' % (what, reference))
        return image

    def run(self):
        params = self.params
        repository, tag = split_target(params['target'])
        replace_dirs = params['replace_dirs'] or []
        overlays_in = params['overlays'] or []
        check_paths(replace_dirs, overlays_in)
        overlays = check_overlays(overlays_in)
        if not replace_dirs and not overlays:
            raise BuildError('Nothing to do: give replace_dirs and/or overlays.')

        missing = [ref for ref in [params['base']] + [i['source_image'] for i in replace_dirs]
                   if get_local_image(self.client, ref) is None]
        if missing and self.check_mode:
            # In check mode the pulls before this task did not run: report the build.
            return dict(changed=True, target='%s:%s' % (repository, tag), image_id=None,
                        previous_image_id=None, inputs_hash=None, labels={}, overlays=[], replaced=[],
                        reason='would build: %s not present on this Docker host yet' % ', '.join(missing))
        base = self._resolve(params['base'], 'Base')
        sources = []
        for item in replace_dirs:
            image = self._resolve(item['source_image'], 'Source')
            info = image_summary(image, item['source_image'])
            info['path'] = item['path']
            info['source_path'] = item.get('source_path') or item['path']
            sources.append(info)

        user_labels = dict((str(k), str(v)) for k, v in (params['labels'] or {}).items())
        digest = inputs_hash(base, sources, overlays, user_labels, params['commit_message'])
        labels = build_labels(params['base'], base, sources, overlays, user_labels, digest)

        existing = get_local_image(self.client, '%s:%s' % (repository, tag))
        before = dict(image_id=existing.id if existing else None,
                      inputs=(existing.labels or {}).get(LABEL_INPUTS) if existing else None)
        result = dict(
            changed=False,
            target='%s:%s' % (repository, tag),
            image_id=before['image_id'],
            previous_image_id=before['image_id'],
            inputs_hash=digest,
            labels=labels,
            overlays=[dict(src=o['src'], dest=o['dest'], md5=o['md5'],
                           mode=None if o['mode'] is None else '%04o' % o['mode'])
                      for o in overlays],
            replaced=[],
            diff=dict(before=before, after=dict(image_id=None, inputs=digest)),
        )
        if existing is not None and before['inputs'] == digest:
            result['reason'] = 'up to date: %s already carries inputs %s' % (result['target'], digest[:12])
            result['diff']['after']['image_id'] = existing.id
            return result
        result['changed'] = True
        result['reason'] = ('target absent' if existing is None
                            else 'inputs changed (%s -> %s)' % ((before['inputs'] or 'none')[:12], digest[:12]))
        if self.check_mode:
            result['image_id'] = None
            return result

        image_id, replaced = self._build(base, sources, overlays, labels, repository, tag)
        result['image_id'] = image_id
        result['replaced'] = replaced
        result['diff']['after']['image_id'] = image_id
        return result

    def _build(self, base, sources, overlays, labels, repository, tag):
        spools = []
        containers = []
        try:
            # 1. Read every replacement directory out of its source image.
            exported = []
            for source in sources:
                image = self._resolve(source['id'], 'Source')
                cid = create_transient_container(self.client, image)
                containers.append(cid)
                found = stat_path(self.client, cid, source['source_path'])
                if found is None or found['type'] != 'directory':
                    raise BuildError('replace_dirs: %s is not a directory in source image %s (found %s).' % (
                        source['source_path'], source['image'], 'nothing' if found is None else found['type']))
                spool = tempfile.TemporaryFile(dir=self.tmpdir)
                spools.append(spool)
                name = posixpath.basename(source['path'].rstrip('/'))
                files, size = export_directory(self.client, cid, source['source_path'], name, spool)
                exported.append((source, spool, files, size))

            # 2. Create the build container from BASE (never started).
            command = None
            if needs_placeholder_command(base):
                command = PLACEHOLDER_COMMAND
                self.warnings.append(
                    'Base image %s has neither CMD nor ENTRYPOINT; Docker needs one to create a '
                    'container, so the built image records CMD %s.' % (base.id[:19], json.dumps(command)))
            cid = create_transient_container(self.client, base, command=command, for_commit=True)
            containers.append(cid)

            # 3. Replace whole directories: placeholder file, then the directory.
            replaced = []
            for source, spool, files, size in exported:
                path = source['path'].rstrip('/')
                parent, name = posixpath.split(path)
                _require_directory(self.client, cid, parent or '/', 'replace_dirs parent')
                before = stat_path(self.client, cid, path)
                self.client.api.put_archive(cid, parent or '/', placeholder_tar(name))
                self.client.api.put_archive(cid, parent or '/', spool)
                replaced.append(dict(path=path, source_image=source['image'], source_id=source['id'],
                                     existed_in_base=before is not None, files=files, bytes=size))

            # 4. Overlays, each checked again right before it is copied.
            for overlay in overlays:
                parent, name = posixpath.split(overlay['dest'])
                _require_directory(self.client, cid, parent or '/', 'overlay %s parent' % overlay['dest'])
                current = stat_path(self.client, cid, overlay['dest'])
                if current is not None and current['type'] == 'directory':
                    raise BuildError('overlay %s: dest %s is a directory in the base image; give the '
                                     'file path.' % (overlay['src'], overlay['dest']))
                mode = overlay['mode']
                if mode is None:
                    mode = (current['mode'] if current is not None and current['type'] == 'file'
                            else stat_module.S_IMODE(os.stat(overlay['src']).st_mode))
                if file_md5(overlay['src']) != overlay['md5']:
                    raise BuildError('%s changed while building: md5 is no longer %s.' % (
                        overlay['src'], overlay['md5']))
                spool = tempfile.TemporaryFile(dir=self.tmpdir)
                spools.append(spool)
                overlay_tar(name, overlay['src'], mode, spool)
                self.client.api.put_archive(cid, parent or '/', spool)

            # 5. Commit with BASE's image configuration plus the labels. (Docker fills in from
            #    the build container only what BASE leaves empty - the same values.)
            config = copy.deepcopy(base.attrs.get('Config') or {})
            merged = dict(config.get('Labels') or {})
            merged.update(labels)
            config['Labels'] = merged
            committed = self.client.api.commit(
                cid, repository=repository, tag=tag, message=self.params['commit_message'],
                author=self.params['author'], pause=False, conf=config)
            return committed['Id'], replaced
        finally:
            for spool in spools:
                spool.close()
            for cid in containers:
                problem = remove_container(self.client, cid)
                if problem:
                    self.warnings.append(problem)
