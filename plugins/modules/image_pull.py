#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_pull
short_description: Pull an image by digest with registry credentials that never touch the disk
version_added: 0.1.0
description:
  - Pulls O(name) unless the Docker daemon already holds it, and returns the image it holds.
  - Also returns Docker's data-root and the free space of its file system, read before the pull, so that in check mode
    one call says whether the image is there and whether there is room for it.
  - And the IDs of the other images of O(name)'s repository that the daemon holds, read before the pull, so that a
    caller that removes old images of the repository knows, without another call, when there is none to remove.
  - The credentials go to the daemon in the pull request's C(X-Registry-Auth) header only. Nothing is
    written to C(/root/.docker/config.json), so no registry login is left on the node when a run
    stops half way, and none has to be removed afterwards (M(community.docker.docker_login) followed
    by M(community.docker.docker_image_pull) and a logout leaves one in both cases until the logout).
  - Without O(username) the daemon gets the credentials of the Docker configuration file, if any
    (for example a login kept on purpose).
  - The pull's own error (refused credentials, unknown digest, unreachable registry, a full data-root) is
    returned in the failure message, with the password removed should the registry echo it, and RV(retryable)
    says whether trying again can help (not for refused credentials, an unknown image or a full data-root).
    When the data-root filled up, the message names it and the free space measured before the pull.
  - Run it with C(async) to pull in the background while other work goes on; the credentials then
    stay only in the task's temporary files, which Ansible removes when the pull ends.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - mindverse.sglang_pd.docker_daemon
attributes:
  check_mode:
    support: full
    details: Looks for the image and measures the free space; reports a change when it would be pulled and pulls
      nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  name:
    description:
      - The image, C(REPOSITORY@sha256:DIGEST) (or C(REPOSITORY:TAG)).
    type: str
    required: true
  username:
    description:
      - Registry user name. Given with O(password).
    type: str
  password:
    description:
      - Registry password or token. Never logged, never returned, never written to a file.
    type: str
  mirrors:
    description:
      - Registries of peers that hold the image (C(HOST:PORT), each a read-only pull-through registry of O(name)'s
        registry, the C(serve_peers) entry point of the sglang_image role), tried in order before O(name)'s own
        registry, without credentials. O(name) must then carry a digest.
      - From a mirror the image is pulled as C(MIRROR/PATH@DIGEST) (the same bytes, since the daemon checks every
        layer and the manifest against their digests), then O(name) is pulled with the credentials, which fetches
        only its manifest since the daemon holds the image; the mirror's reference is removed. A mirror that
        fails or serves wrong bytes sends the pull to the next one, and after the last to O(name)'s registry;
        RV(mirror_errors) says why each one failed.
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Seconds the daemon may stay silent during the pull before it is given up. A pull reports
        progress continuously, so this bounds a stalled pull, not a long one.
    type: int
    default: 600
  warn_below_bytes:
    description:
      - Warn (Ansible's C([WARNING]), in check mode too) when RV(free_bytes) is below this many bytes; V(0) never warns.
      - Only a warning. Whether a pull fits is the caller's decision (the C(sglang_image) role asserts it).
    type: int
    default: 0
  warn_place:
    description: What the warning calls the data-root (for example the node's name and C(Docker's data-root)).
    type: str
    default: Docker's data-root
  warn_setting:
    description:
      - The name the warning gives O(warn_below_bytes) (the caller's variable), so that the operator knows what to change.
    type: str
    default: warn_below_bytes
requirements:
  - docker (Python Docker SDK) >= 5.0
notes:
  - With a digest the daemon checks the content against it; the module also checks that the image
    it returns lists O(name) among its C(RepoDigests).
seealso:
  - module: community.docker.docker_image_pull
  - module: mindverse.sglang_pd.image_artifacts
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Pull the unified image by digest
  mindverse.sglang_pd.image_pull:
    name: registry.example.com/sglang/unified@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    username: "{{ registry_username }}"
    password: "{{ registry_password }}"

- name: Pull it from two peers that hold it, else from the registry
  mindverse.sglang_pd.image_pull:
    name: "{{ image_ref }}"
    mirrors: [10.0.0.11:5001, 10.0.0.12:5001]
    username: "{{ registry_username }}"
    password: "{{ registry_password }}"

- name: Pull it in the background while the model weights are copied
  mindverse.sglang_pd.image_pull:
    name: "{{ image_ref }}"
    username: "{{ registry_username }}"
    password: "{{ registry_password }}"
  async: 3600
  poll: 0
  register: image_pull_job
"""

RETURN = r"""
image:
  description: The image the daemon holds for O(name) (in check mode, empty when it would be pulled).
  returned: always
  type: dict
  contains:
    id:
      description: Image ID.
      type: str
      sample: sha256:4c1b1a5d0f6e2f0b2c4e9d7a6b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c
    repo_digests:
      description: The image's repository digests.
      type: list
      elements: str
    size:
      description: Size in bytes.
      type: int
layers:
  description: Layers the pull downloaded and layers the daemon already held (0 and 0 when nothing was pulled).
  returned: always
  type: dict
  sample: {downloaded: 12, present: 3}
data_root:
  description: The Docker daemon's data-root (C(docker info)'s C(DockerRootDir)).
  returned: always
  type: str
  sample: /var/lib/docker
free_bytes:
  description:
    - Bytes free for an unprivileged writer on the file system that holds RV(data_root), measured where the
      module runs before anything is pulled (as C(df --output=avail)).
    - V(null) when RV(data_root) is not a folder here (O(docker_host) names another machine's daemon).
  returned: always
  type: int
  sample: 512000000000
others:
  description:
    - IDs of the images of O(name)'s repository that the daemon holds, other than the one it holds for O(name), read
      before anything is pulled (Docker's C(reference) filter on the repository, which matches images pulled by
      digest too).
    - Empty when O(name)'s image is the only one of its repository, or the repository has none.
  returned: always
  type: list
  elements: str
  sample: [sha256:9f8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0]
low_space:
  description: Whether RV(free_bytes) is below O(warn_below_bytes) (then the module warned).
  returned: always
  type: bool
source:
  description: Where the image came from, a mirror of O(mirrors) or C(registry); empty when nothing was pulled.
  returned: always
  type: str
  sample: 10.0.0.11:5001
mirror_errors:
  description: The mirrors tried before the one that served (or before the registry), each with the pull's error.
  returned: always
  type: list
  elements: dict
  sample: [{mirror: 10.0.0.11:5001, error: "filesystem layer verification failed for digest sha256:..."}]
seconds:
  description: Seconds the pull took (0 when nothing was pulled).
  returned: always
  type: float
retryable:
  description:
    - Whether the failed pull may succeed when tried again. False when the registry refused the
      credentials or does not know the image (C(unauthorized), C(denied), C(manifest unknown),
      C(not found)), or when Docker's data-root ran out of space (C(no space left on device)); true for
      anything else, such as a registry that cannot be reached.
  returned: failure
  type: bool
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._free_space import free_bytes_at, is_low, low_space_warning
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._image_artifacts import (
    DOCKER_IMPORT_ERROR,
    HAS_DOCKER,
    ArtifactError,
    DockerException,
    NotFound,
    docker_client,
)


# The daemon's answer when the pull filled Docker's data-root.
NO_SPACE = 'no space left on device'
# Words of the answers that no retry changes: refused credentials, an unknown image, a data-root
# out of space (each try fills it again until space is freed there).
FINAL_ERRORS = ('unauthorized', 'denied', 'manifest unknown', 'not found', NO_SPACE)


class PullError(Exception):
    """The pull failed; the message says why, without credentials."""


def retryable(message):
    """Whether a pull that failed with MESSAGE may succeed when tried again."""
    return not any(word in message.lower() for word in FINAL_ERRORS)


def split_reference(name):
    """``(repository, tag or digest)`` of an image reference; the tag defaults to latest."""
    repository, sep, digest = name.partition('@')
    if sep:
        return repository, digest
    slash = name.rfind('/')
    colon = name.rfind(':')
    if colon > slash:
        return name[:colon], name[colon + 1:]
    return name, 'latest'


def image_summary(inspected):
    """The fields of ``docker image inspect`` the module returns."""
    return {'id': inspected.get('Id', ''), 'repo_digests': inspected.get('RepoDigests') or [],
            'size': inspected.get('Size', 0)}


def local_image(api, name):
    """The daemon's inspection of NAME, or None when it does not hold it."""
    try:
        return api.inspect_image(name)
    except NotFound:
        return None


def redact(text, secret):
    """TEXT with SECRET replaced, should a registry or proxy echo it back."""
    return text.replace(secret, '********') if secret else text


def pull(api, name, auth_config=None):
    """Pull NAME, following the daemon's progress stream; return the layer counts."""
    repository, tag = split_reference(name)
    layers = {'downloaded': set(), 'present': set()}
    for event in api.pull(repository, tag=tag, stream=True, decode=True, auth_config=auth_config):
        if event.get('error'):
            raise PullError(event['error'])
        status = event.get('status', '')
        if status == 'Pull complete':
            layers['downloaded'].add(event.get('id'))
        elif status == 'Already exists':
            layers['present'].add(event.get('id'))
    return {key: len(value) for key, value in layers.items()}


def mirror_reference(name, mirror):
    """NAME (REGISTRY/PATH@DIGEST) as the pull-through registry MIRROR serves it: MIRROR/PATH@DIGEST."""
    repository, sep, digest = name.partition('@')
    first, slash, path = repository.partition('/')
    if not slash or not ('.' in first or ':' in first or first == 'localhost'):
        path = repository
    return '%s/%s%s%s' % (mirror, path, sep, digest)


def forget(api, reference):
    """Remove REFERENCE from the daemon (the image stays while another reference names it)."""
    try:
        api.remove_image(reference, noprune=True)
    except (NotFound, DockerException):
        pass


def pull_through_mirrors(api, name, mirrors, auth_config):
    """Pull NAME from the first of MIRRORS that serves it; (layers, mirror, errors), mirror None when none did."""
    errors = []
    for mirror in mirrors:
        mirrored = mirror_reference(name, mirror)
        try:
            layers = pull(api, mirrored)
        except (PullError, DockerException) as exc:
            errors.append({'mirror': mirror, 'error': str(exc)})
            forget(api, mirrored)
            continue
        # The daemon holds the image now: this pull reads only O(name)'s manifest and records the
        # pinned reference; the mirror's reference goes.
        try:
            pull(api, name, auth_config)
        finally:
            forget(api, mirrored)
        return layers, mirror, errors
    return None, None, errors


def where_space_ran_out(message, data_root, free_bytes):
    """MESSAGE, and when the pull ran out of space, where and how much was free before it."""
    if NO_SPACE not in message.lower():
        return message
    return ("%s. Docker's data-root %s ran out of space (%s bytes free before the pull): free space there, "
            "or put the data-root on a larger file system" % (message, data_root, free_bytes))


def room(api):
    """Docker's data-root and the bytes free on its file system (None when that folder is not here)."""
    data_root = api.info().get('DockerRootDir', '')
    if not data_root or not os.path.isdir(data_root):
        return data_root, None
    try:
        return data_root, free_bytes_at(data_root)
    except OSError:
        return data_root, None


def warn_when_low(module, data_root, free_bytes):
    """Warn when the data-root holds less than warn_below_bytes; whether it does."""
    warning = low_space_warning(module.params['warn_place'], data_root, free_bytes, module.params['warn_below_bytes'],
                                module.params['warn_setting'], "the next upgrade's pull may be refused")
    if warning:
        module.warn(warning)
    return is_low(free_bytes, module.params['warn_below_bytes'])


def other_images(api, name, found):
    """IDs of the images of NAME's repository other than FOUND (the image held for NAME, or None)."""
    held = found.get('Id') if found is not None else None
    listed = api.images(name=split_reference(name)[0], quiet=True)
    return sorted(set(image_id for image_id in listed if image_id != held))


def run(module, api):
    """Measure the room, look for the image and the repository's others, pull it when missing; the module's result."""
    name = module.params['name']
    data_root, free_bytes = room(api)
    found = local_image(api, name)
    nothing = {'layers': {'downloaded': 0, 'present': 0}, 'seconds': 0.0, 'data_root': data_root, 'free_bytes': free_bytes,
               'others': other_images(api, name, found), 'low_space': warn_when_low(module, data_root, free_bytes),
               'source': '', 'mirror_errors': []}
    if found is not None:
        return dict(nothing, changed=False, image=image_summary(found))
    if module.check_mode:
        return dict(nothing, changed=True, image={})
    auth_config = None
    if module.params['username']:
        auth_config = {'username': module.params['username'], 'password': module.params['password']}
    started = time.monotonic()
    try:
        layers, source, errors = pull_through_mirrors(api, name, module.params['mirrors'], auth_config)
        if source is None:
            layers, source = pull(api, name, auth_config), 'registry'
    except PullError as exc:
        raise PullError(where_space_ran_out(str(exc), data_root, free_bytes)) from None
    seconds = round(time.monotonic() - started, 3)
    found = local_image(api, name)
    if found is None:
        raise PullError('the pull ended without error, but the daemon does not hold %s' % name)
    if '@' in name and name not in (found.get('RepoDigests') or []):
        raise PullError('the pulled image lists the repository digests %s, not %s' % (found.get('RepoDigests'), name))
    return dict(nothing, changed=True, image=image_summary(found), layers=layers, seconds=seconds, source=source,
                mirror_errors=errors)


def main():
    module = AnsibleModule(
        argument_spec={
            'name': {'type': 'str', 'required': True},
            'username': {'type': 'str'},
            'password': {'type': 'str', 'no_log': True},
            'docker_host': {'type': 'str'},
            'timeout': {'type': 'int', 'default': 600},
            'warn_below_bytes': {'type': 'int', 'default': 0},
            'warn_place': {'type': 'str', 'default': "Docker's data-root"},
            'warn_setting': {'type': 'str', 'default': 'warn_below_bytes'},
            'mirrors': {'type': 'list', 'elements': 'str', 'default': []},
        },
        required_together=[('username', 'password')],
        supports_check_mode=True,
    )
    if module.params['mirrors'] and '@' not in module.params['name']:
        module.fail_json(msg='image_pull: %s has no digest; pulling from mirrors (peers) needs REPOSITORY@sha256:DIGEST, '
                             'so that the bytes are the registry\'s own [SGLPD-IMG-041]' % module.params['name'])
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib('docker') + ' [SGLPD-HST-010]', exception=DOCKER_IMPORT_ERROR)
    password = module.params['password']
    try:
        result = run(module, docker_client(module.params['docker_host'], module.params['timeout']).api)
    except ArtifactError as exc:
        module.fail_json(msg=f'{exc} [SGLPD-IMG-001]', retryable=True)
    except PullError as exc:
        message = redact(str(exc), password)
        module.fail_json(msg='Pulling %s failed: %s [SGLPD-IMG-006]' % (module.params['name'], message), retryable=retryable(message))
    except DockerException as exc:
        message = redact(str(exc), password)
        module.fail_json(msg='Pulling %s failed: the Docker daemon answered: %s [SGLPD-IMG-006]' % (module.params['name'], message),
                         retryable=retryable(message))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
