#!/usr/bin/python
# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0

from __future__ import annotations

DOCUMENTATION = r"""
---
module: image_artifacts
short_description: Verify files inside a local Docker image without starting a container
version_added: 0.1.0
description:
  - Checks a manifest of files inside a local Docker image - md5 and sha256, present or absent,
    and how many lines contain a fixed string - and names every file that does not match, with
    the expected and the found value.
  - No container is ever started. When the Docker daemon runs on the node itself (a unix socket),
    uses the overlay2 storage driver and the module can read its layer directories (as root), each
    file is read straight from the image's layers - whiteouts and opaque directories respected,
    symlinks resolved inside the image as Docker does - and hashed with large reads.
  - Otherwise (a remote daemon, another storage driver, no access to the layers, or
    O(read_via=archive)) the module creates a container from the image, streams each file out of
    it through the Docker archive API (what C(docker cp) uses), hashes it on the fly and removes
    the container again. Both ways give the same results; RV(read_via) says which one ran.
  - Results are cached per (image ID, manifest) under O(cache_dir). An image ID names the image's
    content, so a cached result stays true; a re-run only inspects the image (one request on the
    Docker socket, without the Docker SDK when the daemon is local) and reads the cache.
  - The module never changes anything (C(changed) is always false); writing the cache file does not
    count as a change.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - mindverse.sglang_pd.docker_daemon
attributes:
  check_mode:
    support: full
    details: Reads the image and the cache as usual; does not write the cache file.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  image:
    description:
      - The local image to check - a name, C(name:tag), C(name@sha256:...) or image ID.
      - The image must already be present on the Docker host; the module never pulls.
    type: str
    required: true
  artifacts:
    description:
      - The manifest - one entry per path inside the image.
      - Symlinks are followed (as C(md5sum) would), inside the image.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - Absolute path inside the image.
        type: str
        required: true
      state:
        description:
          - V(present) - the path must exist; its checksums and text counts are reported.
          - V(absent) - the path must not exist.
        type: str
        choices: [present, absent]
        default: present
      md5:
        description:
          - Expected md5 of the file. The full 32 hex characters are the norm.
          - A prefix of at least 8 hex characters is accepted and reported as C(match=prefix). A
            trailing C(...) is ignored, so values copied from notes like V(84946bbb...) work.
          - Anything shorter or not hexadecimal fails before the image is read.
        type: str
      sha256:
        description:
          - Expected sha256 of the file (full 64 hex characters, or a prefix of at least 8). A
            leading C(sha256:) is ignored.
        type: str
      text_count:
        description:
          - Text assertions - how many lines of the file contain O(artifacts[].text_count[].pattern),
            exactly what C(grep -c -F PATTERN FILE) prints.
        type: list
        elements: dict
        suboptions:
          pattern:
            description:
              - Fixed string (not a regular expression) on one line.
            type: str
            required: true
          count:
            description:
              - Expected number of lines that contain the pattern.
            type: int
            required: true
  fail_on_mismatch:
    description:
      - Fail when any check fails, with a message that lists every failing file, what was
        expected and what was found.
      - With V(false) the module succeeds and reports C(passed=false) and RV(failures).
    type: bool
    default: true
  compute_sha256:
    description:
      - Report the sha256 of every file, not only of files that have an expected O(artifacts[].sha256).
      - Costs a second pass of hashing over the same bytes (both run on the one stream).
    type: bool
    default: false
  cache_dir:
    description:
      - Directory on the Docker host for cached results, one JSON file per (image ID, manifest).
      - When it cannot be written the module warns and carries on. An empty string turns caching off.
    type: path
    default: /var/cache/sglang-pd/artifacts
  use_cache:
    description:
      - Read cached results. With V(false) the image is always read again (the cache file is still
        refreshed).
    type: bool
    default: true
  read_via:
    description:
      - How files are read from the image when the cache has no answer.
      - V(auto) - from the image's overlay2 layer directories when the daemon is local and they can
        be read, else through the Docker archive API.
      - V(archive) - always through the Docker archive API (a created, never started container).
    type: str
    choices: [auto, archive]
    default: auto
  timeout:
    description:
      - Timeout in seconds for each call to the Docker API.
    type: int
    default: 300
requirements:
  - docker (Python Docker SDK) >= 5.0, for the archive API (a remote daemon, a storage driver other
    than overlay2, layers this process cannot read, or O(read_via=archive)); reading the layers and
    cached verifications of a local daemon do without it.
notes:
  - Works with images that have no CMD or ENTRYPOINT (for example from C(docker import)); Docker
    requires a command to create a container, so a placeholder is set. It is never run.
  - The layers hold the image itself; the archive API reads a created container, which adds a
    few files of its own (C(/.dockerenv), empty C(/etc/hosts), C(/etc/hostname),
    C(/etc/resolv.conf), the C(/etc/mtab) symlink). Checks of those paths can differ.
  - Reading the layers needs CAP_SYS_ADMIN (to see which directories are opaque); without it the
    archive API is used.
seealso:
  - module: mindverse.sglang_pd.image_overlay_commit
author:
  - mindverse infrastructure team (@mindverse)
"""

EXAMPLES = r"""
- name: Verify the unified image before any service restarts
  mindverse.sglang_pd.image_artifacts:
    image: myregistry.azurecr.io/mindverse/sglang@sha256:2d7471420f60...
    artifacts:
      - path: /opt/venv/lib/python3.10/site-packages/sglang_router/sglang_router_rs.abi3.so
        md5: 84946bbb
      - path: /opt/venv/lib/python3.10/site-packages/mooncake/engine.cpython-310-x86_64-linux-gnu.so
        md5: 0e1b8fdd2d39e007b58c3e1711ec398b
      - path: /opt/venv/lib/python3.10/site-packages/sglang_router/router.py
        text_count:
          - pattern: prefill_group_ids
            count: 0

- name: Read checksums without failing (for example to pin them)
  mindverse.sglang_pd.image_artifacts:
    image: mindverse/sglang:v0.5.14-cp-layersplit-v17-cacheaware-fix
    artifacts:
      - path: /opt/venv/lib/python3.10/site-packages/sglang_router/sglang_router_rs.abi3.so
    compute_sha256: true
    fail_on_mismatch: false
  register: ca_router
"""

RETURN = r"""
image_id:
  description: ID of the checked image.
  returned: success
  type: str
  sample: sha256:2d7471420f60b8a0c6e0d5cf2b3f4e6f0c9d2a1b3c4d5e6f7a8b9c0d1e2f3a4b
passed:
  description: Whether every check passed.
  returned: success
  type: bool
  sample: true
cached:
  description: Whether the result came from the cache (nothing was read from the image).
  returned: success
  type: bool
  sample: false
read_via:
  description:
    - How the files were read in this run - V(layers) (the image's overlay2 layer directories) or
      V(archive) (the Docker archive API); null when the result came from the cache.
  returned: success
  type: str
  sample: layers
cache_path:
  description: Cache file for this (image ID, manifest); null when O(cache_dir) is empty.
  returned: success
  type: str
  sample: /var/cache/sglang-pd/artifacts/2d7471420f60...-9f2c....json
failures:
  description: One sentence per failed check, naming the file, what was expected and what was found.
  returned: success
  type: list
  elements: str
  sample:
    - "/opt/venv/lib/python3.10/site-packages/mooncake/engine.cpython-310-x86_64-linux-gnu.so: md5 expected
      0e1b8fdd2d39e007b58c3e1711ec398b, found 5c9a2b1f0a6f43d28f1b7d7e0b6f1c2e."
artifacts:
  description: One result per manifest entry, in manifest order.
  returned: success
  type: list
  elements: dict
  contains:
    path:
      description: Path inside the image.
      type: str
      sample: /opt/venv/lib/python3.10/site-packages/sglang_router/router.py
    state:
      description: Expected state.
      type: str
      sample: present
    present:
      description: Whether the path exists in the image.
      type: bool
      sample: true
    type:
      description: V(file), V(directory), V(other), V(dangling symlink), or null when absent.
      type: str
      sample: file
    link_target:
      description: Where a symlink at O(artifacts[].path) points (resolved inside the image), else null.
      type: str
      sample: null
    size:
      description: Size in bytes.
      type: int
      sample: 44379136
    md5:
      description: md5 found (regular files only).
      type: str
      sample: 84946bbb0c5e9a3f1d2b7c4e6a8f0d13
    sha256:
      description: sha256 found, when asked for.
      type: str
      sample: null
    expected_md5:
      description: Expected md5 (normalised, lower case), or null.
      type: str
      sample: 84946bbb
    expected_sha256:
      description: Expected sha256 (normalised), or null.
      type: str
      sample: null
    match:
      description:
        - V(full) every expected digest matched in full; V(prefix) at least one matched by prefix only;
          V(mismatch) a digest differs; V(present) exists and nothing was compared; V(absent) missing
          although expected present; V(removed) absent as expected; V(unexpected) present although
          expected absent; V(not_file) checksums or text counts were asked of a non-file.
      type: str
      sample: prefix
    text_counts:
      description: One entry per text assertion - pattern, expected, found (lines), ok.
      type: list
      elements: dict
      sample:
        - pattern: prefill_group_ids
          expected: 0
          found: 0
          ok: true
    ok:
      description: Whether every check of this entry passed.
      type: bool
      sample: true
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._artifact_checks import (
    ArtifactError,
    normalize_manifest,
)
from ansible_collections.mindverse.sglang_pd.plugins.module_utils._image_verify import (
    DockerCallError,
    DockerSDKMissing,
    verify_image,
)


def verify(module, manifest):
    """Run verify_image with the module's parameters; fail the module on any error."""
    params = module.params
    try:
        return verify_image(
            params['image'],
            manifest,
            docker_host=params['docker_host'],
            timeout=params['timeout'],
            cache_dir=params['cache_dir'] or None,
            use_cache=params['use_cache'],
            write=not module.check_mode,
            compute_sha256=params['compute_sha256'],
            read_via=params['read_via'],
        )
    except DockerSDKMissing as exc:
        module.fail_json(msg=missing_required_lib('docker') + ' [SGLPD-HST-010]', exception=exc.details, changed=False)
    except DockerCallError as exc:
        module.fail_json(msg=f'{exc} [SGLPD-IMG-001]', exception=exc.details, changed=False)
    except ArtifactError as exc:
        module.fail_json(msg=f'{exc} [SGLPD-IMG-002]', changed=False)
    return None  # not reached: fail_json exits


def run_module(module):
    """Verify the manifest and exit; see DOCUMENTATION."""
    params = module.params
    try:
        manifest = normalize_manifest(params['artifacts'])
    except ArtifactError as exc:
        module.fail_json(msg=f'{exc} [SGLPD-IMG-003]')
    result = verify(module, manifest)
    for warning in result.pop('warnings'):
        module.warn(warning)
    if result['failures'] and params['fail_on_mismatch']:
        module.fail_json(
            msg='Image %s (%s) failed %d artifact check(s): %s [SGLPD-IMG-004]'
                % (params['image'], result['image_id'], len(result['failures']),
                   ' '.join(result['failures'])),
            changed=False, **result)
    module.exit_json(changed=False, **result)


def main():
    text_count_spec = dict(
        pattern=dict(type='str', required=True),
        count=dict(type='int', required=True),
    )
    artifact_spec = dict(
        path=dict(type='str', required=True),
        state=dict(type='str', choices=['present', 'absent'], default='present'),
        md5=dict(type='str'),
        sha256=dict(type='str'),
        text_count=dict(type='list', elements='dict', options=text_count_spec),
    )
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type='str', required=True),
            artifacts=dict(type='list', elements='dict', required=True, options=artifact_spec),
            fail_on_mismatch=dict(type='bool', default=True),
            compute_sha256=dict(type='bool', default=False),
            cache_dir=dict(type='path', default='/var/cache/sglang-pd/artifacts'),
            use_cache=dict(type='bool', default=True),
            read_via=dict(type='str', choices=['auto', 'archive'], default='auto'),
            docker_host=dict(type='str'),
            timeout=dict(type='int', default=300),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == '__main__':
    main()
