"""The engine build of playbooks/mooncake_patch.yml, run in a real builder container.

No ROCm toolchain exists here, so the builder image is the Debian base image that
set-up builds and the "build" is a script made for this test that writes an engine
file: what is tested is the orchestration — the container runs the rendered script on
the patched tree, the engine is collected and its md5 recorded as mooncake_patch_engine.
"""

from __future__ import annotations

import hashlib
import shutil

import pytest

from image_names import image_exists, setup_image
from test_mooncake_patch_playbook import FIXTURES, play

BUILDER = setup_image('SGLANG_PD_BASE_IMAGE')
ENGINE = 'engine.cpython-310-x86_64-linux-gnu.so'
CONTENT = 'fixture engine built from a patched tree\n'


pytestmark = [pytest.mark.docker,
              pytest.mark.skipif(not image_exists(BUILDER), reason=BUILDER + ' is built by scripts/setup (make setup)')]


def test_build_runs_in_the_builder_container_and_records_the_engine(tmp_path):
    src = tmp_path / 'Mooncake'
    shutil.copytree(FIXTURES + '/older', src)
    script = tmp_path / 'fake-build.sh.j2'
    # The "build": proves it ran on the patched tree inside the container, then writes the engine.
    script.write_text(
        '#!/bin/sh\nset -e\n'
        'grep -q USE_HIP_DISABLED {{ mooncake_patch_src }}/mooncake-transfer-engine/src/transfer_engine_impl.cpp\n'
        'test -f /.dockerenv\n'
        "printf '%s\\n' '" + CONTENT.strip() + "' > {{ mooncake_patch_output_dir }}/" + ENGINE + '\n')

    run = play(tmp_path, {'mooncake_src': str(src), 'mooncake_patch_build': True,
                          'mooncake_patch_builder_image': BUILDER,
                          'mooncake_patch_build_script': str(script)})

    assert run.rc == 0, run.stdout[-3000:]
    facts = [res['ansible_facts']['mooncake_patch_engine'] for _task, res in run.task_results('runner_on_ok')
             if 'mooncake_patch_engine' in res.get('ansible_facts', {})]
    assert len(facts) == 1
    engine = facts[0]
    assert engine['path'].endswith('/' + ENGINE)
    assert engine['md5'] == hashlib.md5(CONTENT.encode()).hexdigest()
    with open(engine['path'], encoding='utf-8') as handle:
        assert handle.read() == CONTENT


def test_a_build_that_writes_no_engine_fails_naming_the_script(tmp_path):
    src = tmp_path / 'Mooncake'
    shutil.copytree(FIXTURES + '/older', src)
    script = tmp_path / 'broken-build.sh.j2'
    script.write_text('#!/bin/sh\necho built nothing\n')

    run = play(tmp_path, {'mooncake_src': str(src), 'mooncake_patch_build': True,
                          'mooncake_patch_builder_image': BUILDER,
                          'mooncake_patch_build_script': str(script)})

    assert run.rc != 0
    messages = ' '.join(res.get('msg', '') for _task, res in run.failed)
    assert 'broken-build.sh.j2' in messages and 'exactly one file' in messages
