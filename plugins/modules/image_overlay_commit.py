#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_overlay_commit
short_description: Build an image from a base by replacing whole directories and overlaying pinned files
version_added: 0.1.0
description:
  - The unified-image v2 recipe, repeatable. Start from O(base); replace each directory listed in
    O(replace_dirs) by the same directory taken from another image (files present only in
    O(base) are gone afterwards); copy each O(overlays) file, whose md5 is checked first; commit
    as O(target) with labels that record every input.
  - No container is ever started. Containers are created, written through the Docker archive API
    (what C(docker cp) uses) and committed; every container the module creates is removed again.
  - How a whole directory is replaced - Docker's C(PUT /containers/{id}/archive) removes an existing
    directory when the tar it extracts holds a non-directory of the same name (the API's
    C(noOverwriteDirNonDir) is off by default). The module first puts a placeholder file named like
    the directory, which removes O(base)'s directory with its whole content, then puts the source
    directory, which replaces the placeholder. The removal is an ordinary file system change of the
    container, so the committed layer records it (with overlay2 as an opaque directory) and nothing
    from O(base)'s copy shows through. A plain C(docker cp) of the directory (the seed's recipe)
    merges instead and keeps O(base)-only files.
  - "Why not the other ways: C(docker cp) and C(put_archive) alone merge; deleting files otherwise
    needs a process in the container (RUN rm), which this module must not start; a hand-made layer
    with whiteouts loaded through C(docker load) relies on the daemon skipping BASE's layers that it
    already holds, which the classic image store does but which is not guaranteed elsewhere (for
    example the containerd image store)."
  - Idempotent - the labels carry a hash of all inputs (image IDs of O(base) and of each
    O(replace_dirs[].source_image), overlay md5s and modes, O(labels), O(commit_message)). When O(target)
    already exists locally with the same hash nothing is built.
  - Pushing is not done here; use M(community.docker.docker_image_push).
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - mindverse.sglang_pd.docker_daemon
attributes:
  check_mode:
    support: full
    details: Checks the overlay sources and computes the inputs hash; reports whether a build would run.
  diff_mode:
    support: full
    details: Before and after image ID and inputs hash.
  platform:
    platforms: posix
options:
  base:
    description:
      - Image to start from (name, name:tag, name@digest or ID). Must be present locally.
    type: str
    required: true
  target:
    description:
      - C(repository:tag) of the image to commit. The tag defaults to V(latest).
    type: str
    required: true
  replace_dirs:
    description:
      - Directories replaced as a whole, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      source_image:
        description:
          - Image the directory is taken from. Must be present locally.
        type: str
        required: true
      path:
        description:
          - Absolute path of the directory in O(target). Its parent must exist in O(base).
        type: str
        required: true
      source_path:
        description:
          - Path of the directory in O(replace_dirs[].source_image), when it differs from
            O(replace_dirs[].path).
        type: str
  overlays:
    description:
      - Files copied into the image after O(replace_dirs), each pinned by md5. Owned by root.
    type: list
    elements: dict
    default: []
    suboptions:
      src:
        description:
          - File on the host that runs the module (the builder).
        type: path
        required: true
      dest:
        description:
          - Absolute file path inside the image. Its parent directory must exist in O(base).
        type: str
        required: true
      md5:
        description:
          - Expected md5 of O(overlays[].src) (full 32 hex characters; a prefix of at least 8 is
            accepted). Checked before anything is built; a mismatch fails naming the file,
            expected and found.
        type: str
        required: true
      mode:
        description:
          - Octal file mode such as V('0755'). Default - the mode of the file being replaced in
            O(base), else the mode of O(overlays[].src).
        type: str
  labels:
    description:
      - Labels added to the image, on top of those inherited from O(base) and those the module
        records (C(org.mindverse.sglang_pd.base), C(.sources), C(.overlays), C(.inputs)).
    type: dict
    default: {}
  commit_message:
    description:
      - Commit message (shown by C(docker history)). Called C(message) in C(docker commit); Ansible
        reserves that option name.
    type: str
    default: built by mindverse.sglang_pd.image_overlay_commit
  author:
    description:
      - Commit author.
    type: str
  timeout:
    description:
      - Timeout in seconds for each call to the Docker API.
    type: int
    default: 300
requirements:
  - docker (Python Docker SDK) >= 5.0
notes:
  - The image configuration (CMD, ENTRYPOINT, ENV, ...) is O(base)'s. When O(base) has neither CMD
    nor ENTRYPOINT, Docker cannot create a container without a command; the module then sets
    C(["/bin/sh"]) (never run) and warns, because Docker records it in the committed image.
  - Verify the result with M(mindverse.sglang_pd.image_artifacts).
seealso:
  - module: mindverse.sglang_pd.image_artifacts
  - module: community.docker.docker_image_push
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Build the unified image (v2 - full sglang_router package from the cache-aware image)
  mindverse.sglang_pd.image_overlay_commit:
    base: myregistry.azurecr.io/mindverse/sglang:v0.5.14-cp-layersplit-v17-patched-ropefix6
    target: myregistry.azurecr.io/mindverse/sglang:v0.5.14-cp-layersplit-v17-unified
    replace_dirs:
      - source_image: myregistry.azurecr.io/mindverse/sglang:v0.5.14-cp-layersplit-v17-cacheaware-fix
        path: /opt/venv/lib/python3.10/site-packages/sglang_router
    overlays:
      - src: /srv/patches/mooncake/engine_v3.so
        dest: /opt/venv/lib/python3.10/site-packages/mooncake/engine.cpython-310-x86_64-linux-gnu.so
        md5: 0e1b8fdd2d39e007b58c3e1711ec398b
    commit_message: "unified v2: ropefix6 + FULL cacheaware sglang_router pkg"
  register: unified
"""

RETURN = r"""
image_id:
  description: ID of O(target) after the run; null in check mode when a build would run.
  returned: success
  type: str
  sample: sha256:9a1f0c3e5b7d...
previous_image_id:
  description: ID O(target) had before the run, or null.
  returned: success
  type: str
  sample: null
target:
  description: O(target) as C(repository:tag).
  returned: success
  type: str
  sample: myregistry.azurecr.io/mindverse/sglang:v0.5.14-cp-layersplit-v17-unified
inputs_hash:
  description: sha256 of all inputs; recorded in label C(org.mindverse.sglang_pd.inputs).
  returned: success
  type: str
  sample: 5b0f3c8e2a...
reason:
  description: Why the image was (or would be) built, or why not.
  returned: success
  type: str
  sample: target absent
labels:
  description: Labels the module records on O(target) (plus O(labels)).
  returned: success
  type: dict
  sample:
    org.mindverse.sglang_pd.inputs: 5b0f3c8e2a...
    org.mindverse.sglang_pd.overlays: '{"/opt/venv/.../engine.cpython-310-x86_64-linux-gnu.so": "0e1b8fdd2d39e007b58c3e1711ec398b"}'
overlays:
  description: Overlays as checked - src, dest, md5 found, mode (null means kept from O(base) or src).
  returned: success
  type: list
  elements: dict
  sample:
    - src: /srv/patches/mooncake/engine_v3.so
      dest: /opt/venv/lib/python3.10/site-packages/mooncake/engine.cpython-310-x86_64-linux-gnu.so
      md5: 0e1b8fdd2d39e007b58c3e1711ec398b
      mode: null
replaced:
  description:
    - Directories replaced in this run (empty when nothing was built) - path, source_image,
      source_id, existed_in_base, bytes, and files (relative path to md5).
  returned: success
  type: list
  elements: dict
  sample:
    - path: /opt/venv/lib/python3.10/site-packages/sglang_router
      source_image: mindverse/sglang:v0.5.14-cp-layersplit-v17-cacheaware-fix
      source_id: sha256:77e1...
      existed_in_base: true
      bytes: 44503210
      files:
        router.py: 3b9d...
        sglang_router_rs.abi3.so: 84946bbb...
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._image_artifacts import (
    DOCKER_IMPORT_ERROR,
    HAS_DOCKER,
    ArtifactError,
    DockerException,
    docker_client,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._image_overlay_commit import (
    OverlayCommit,
)


def run_module(module):
    """Build (or not) and exit; see DOCUMENTATION."""
    if not HAS_DOCKER:
        module.fail_json(msg=missing_required_lib('docker') + ' [SGLPD-HST-010]', exception=DOCKER_IMPORT_ERROR)
    builder = None
    error = None
    try:
        client = docker_client(module.params['docker_host'], module.params['timeout'])
        builder = OverlayCommit(client, module.params, check_mode=module.check_mode,
                                tmpdir=module.tmpdir)
        result = builder.run()
    except ArtifactError as exc:
        error = dict(msg=f'{exc} [SGLPD-IMG-005]')
    except DockerException as exc:
        error = dict(msg='Docker error while building %s: %s [SGLPD-IMG-001]' % (module.params['target'], exc),
                     exception=traceback.format_exc())
    for warning in builder.warnings if builder is not None else []:
        module.warn(warning)
    if error:
        module.fail_json(changed=False, **error)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            base=dict(type='str', required=True),
            target=dict(type='str', required=True),
            replace_dirs=dict(type='list', elements='dict', default=[], options=dict(
                source_image=dict(type='str', required=True),
                path=dict(type='str', required=True),
                source_path=dict(type='str'),
            )),
            overlays=dict(type='list', elements='dict', default=[], options=dict(
                src=dict(type='path', required=True),
                dest=dict(type='str', required=True),
                md5=dict(type='str', required=True),
                mode=dict(type='str'),
            )),
            labels=dict(type='dict', default={}),
            commit_message=dict(type='str', default='built by mindverse.sglang_pd.image_overlay_commit'),
            author=dict(type='str'),
            docker_host=dict(type='str'),
            timeout=dict(type='int', default=300),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == '__main__':
    main()
