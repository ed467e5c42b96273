"""Tests of mindverse.sglang_pd.mooncake_patch against Mooncake-shaped source-tree fixtures.

tests/unit/fixtures/mooncake/older       01d1eb2a-era tree: hip priority is the literal `return 4;`
tests/unit/fixtures/mooncake/conditional v0.3.12+ tree: `std::getenv("MC_DISABLE_HIP") ? 0 : 4`
"""

from __future__ import annotations

import json
import os
import shutil
import stat

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _mooncake_patch as mp
from ansible_collections.mindverse.sglang_pd.plugins.modules import mooncake_patch

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', 'fixtures', 'mooncake')

IMPL = 'mooncake-transfer-engine/src/transfer_engine_impl.cpp'
MULTI = 'mooncake-transfer-engine/src/multi_transport.cpp'
RDMA_CMAKE = 'mooncake-transfer-engine/src/transport/rdma_transport/CMakeLists.txt'
SRC_CMAKE = 'mooncake-transfer-engine/src/CMakeLists.txt'
ALL_FILES = (IMPL, MULTI, RDMA_CMAKE, SRC_CMAKE)

DMABUF_LINE = 'target_compile_definitions(rdma_transport PRIVATE USE_HIP_DMABUF)'

# The exact line edits, with their real neighbour so a wrong match cannot pass.
IMPL_BEFORE = '#ifdef USE_HIP\n        // HIP transport handles intra-node GPU P2P'
IMPL_AFTER = '#ifdef USE_HIP_DISABLED\n        // HIP transport handles intra-node GPU P2P'
PRIORITY_BEFORE = {
    'older': '            if (p == "hip") return 4;\n',
    'conditional': '            if (p == "hip") return std::getenv("MC_DISABLE_HIP") ? 0 : 4;\n',
}
PRIORITY_AFTER = '            if (p == "hip") return 0;\n'
STYLE_DETAIL = {'older': 'older literal', 'conditional': 'conditional on MC_DISABLE_HIP'}


def read(root, rel):
    with open(os.path.join(str(root), rel), 'rb') as handle:
        return handle.read().decode('utf-8')


def snapshot(root):
    """Bytes, mtime and mode of every file under root, and the list of files (catches stray temp files)."""
    state = {}
    for dirpath, dummy, filenames in os.walk(str(root)):
        for name in filenames:
            path = os.path.join(dirpath, name)
            info = os.stat(path)
            with open(path, 'rb') as handle:
                state[os.path.relpath(path, str(root))] = (handle.read(), info.st_mtime_ns, stat.S_IMODE(info.st_mode))
    return state


def tree(tmp_path, style):
    root = tmp_path / ('mooncake-' + style)
    shutil.copytree(os.path.join(FIXTURES, style), str(root))
    return root


def expected_texts(root, style):
    """The whole expected text of each file after the three fixes."""
    impl, multi, rdma = read(root, IMPL), read(root, MULTI), read(root, RDMA_CMAKE)
    assert impl.count(IMPL_BEFORE) == 1
    assert multi.count(PRIORITY_BEFORE[style]) == 1
    return {
        IMPL: impl.replace(IMPL_BEFORE, IMPL_AFTER),
        MULTI: multi.replace(PRIORITY_BEFORE[style], PRIORITY_AFTER),
        RDMA_CMAKE: rdma + DMABUF_LINE + '\n',
        SRC_CMAKE: read(root, SRC_CMAKE),
    }


def run(capsys, args, check_mode=False, diff=False):
    args = dict(args)
    if check_mode:
        args['_ansible_check_mode'] = True
    if diff:
        args['_ansible_diff'] = True
    with patch_module_args(args):
        with pytest.raises(SystemExit) as exc:
            mooncake_patch.main()
    result = json.loads(capsys.readouterr().out)
    assert (exc.value.code != 0) == bool(result.get('failed'))
    return result


def statuses(result):
    return {fix['name']: fix['status'] for fix in result['fixes']}


@pytest.mark.parametrize('style', ['older', 'conditional'])
def test_apply_gives_exact_files(tmp_path, capsys, style):
    root = tree(tmp_path, style)
    expected = expected_texts(root, style)
    os.chmod(str(root / MULTI), 0o640)

    result = run(capsys, dict(src=str(root)))

    assert result['changed'] is True
    assert statuses(result) == dict(hip_transport_guard='applied', hip_priority='applied', rdma_dmabuf='applied')
    assert [fix['file'] for fix in result['fixes']] == [IMPL, MULTI, RDMA_CMAKE]
    details = {fix['name']: fix['detail'] for fix in result['fixes']}
    assert STYLE_DETAIL[style] in details['hip_priority']
    for rel in ALL_FILES:
        assert read(root, rel) == expected[rel], rel
    assert stat.S_IMODE(os.stat(str(root / MULTI)).st_mode) == 0o640


@pytest.mark.parametrize('style', ['older', 'conditional'])
def test_exact_resulting_lines_and_other_hip_guards_kept(tmp_path, capsys, style):
    root = tree(tmp_path, style)
    run(capsys, dict(src=str(root)))

    impl = read(root, IMPL).splitlines()
    guard = impl.index('#ifdef USE_HIP_DISABLED')
    assert impl[guard + 1:guard + 5] == [
        '        // HIP transport handles intra-node GPU P2P via XGMI/IPC and can',
        '        // coexist with the cross-node transport (RDMA/TCP) selected above.',
        '        {',
        '            Transport* hip_transport =',
    ]
    assert '#ifdef USE_HIP' not in impl

    multi = read(root, MULTI).splitlines()
    assert multi.count('            if (p == "hip") return 0;') == 1
    assert multi.count('            if (p == "rdma") return 2;') == 1
    assert not any('return 4;' in line and '"hip"' in line for line in multi)
    # The include guard and the HipTransport construction guard stay USE_HIP.
    hip_guards = [i for i, line in enumerate(multi) if line == '#ifdef USE_HIP']
    assert len(hip_guards) == 2
    assert multi[hip_guards[0] + 1] == '#include "transport/hip_transport/hip_transport.h"'
    assert multi[hip_guards[1] + 1:hip_guards[1] + 3] == [
        '    else if (std::string(proto) == "hip") {',
        '        transport = new HipTransport();',
    ]
    assert 'USE_HIP_DISABLED' not in read(root, MULTI)
    if style == 'conditional':
        assert '            if (p == "maca") return std::getenv("MC_DISABLE_MACA") ? 0 : 4;' in multi

    rdma = read(root, RDMA_CMAKE).splitlines()
    assert rdma.count(DMABUF_LINE) == 1
    assert rdma[-1] == DMABUF_LINE


@pytest.mark.parametrize('style', ['older', 'conditional'])
def test_second_run_changes_nothing(tmp_path, capsys, style):
    root = tree(tmp_path, style)
    run(capsys, dict(src=str(root)))
    before = snapshot(root)

    result = run(capsys, dict(src=str(root)), diff=True)

    assert result['changed'] is False
    assert statuses(result) == dict(hip_transport_guard='already_present', hip_priority='already_present',
                                    rdma_dmabuf='already_present')
    assert result['patch'] == ''
    assert result['diff'] == []
    assert snapshot(root) == before


@pytest.mark.parametrize('style', ['older', 'conditional'])
def test_check_mode_writes_nothing_and_shows_the_diff(tmp_path, capsys, style):
    root = tree(tmp_path, style)
    expected = expected_texts(root, style)
    before = snapshot(root)

    result = run(capsys, dict(src=str(root)), check_mode=True, diff=True)

    assert snapshot(root) == before
    assert result['changed'] is True
    assert statuses(result) == dict(hip_transport_guard='applied', hip_priority='applied', rdma_dmabuf='applied')
    diffs = {entry['before_header']: entry for entry in result['diff']}
    assert sorted(diffs) == sorted([IMPL, MULTI, RDMA_CMAKE])
    for rel, entry in diffs.items():
        assert entry['before'] == read(root, rel)
        assert entry['after'] == expected[rel]
    patch = result['patch']
    assert '-' + PRIORITY_BEFORE[style] in patch
    assert '+' + PRIORITY_AFTER in patch
    assert '-#ifdef USE_HIP\n+#ifdef USE_HIP_DISABLED\n' in patch
    assert '+' + DMABUF_LINE + '\n' in patch
    # Exactly one line removed and one added per edited source file, one line added to CMake.
    assert patch.count('\n-#') + patch.count('\n-    ') == 2
    assert patch.count('\n+') - patch.count('\n+++') == 3


@pytest.mark.parametrize('fixes, changed_files', [
    (['hip_priority'], [MULTI]),
    (['rdma_dmabuf', 'hip_transport_guard'], [IMPL, RDMA_CMAKE]),
])
def test_only_requested_fixes(tmp_path, capsys, fixes, changed_files):
    root = tree(tmp_path, 'older')
    originals = {rel: read(root, rel) for rel in ALL_FILES}

    result = run(capsys, dict(src=str(root), fixes=fixes))

    assert sorted(statuses(result)) == sorted(fixes)
    for rel in ALL_FILES:
        assert (read(root, rel) != originals[rel]) == (rel in changed_files), rel


def _break(root, rel, old, new):
    path = os.path.join(str(root), rel)
    with open(path) as handle:
        text = handle.read()
    assert old in text
    with open(path, 'w') as handle:
        handle.write(text.replace(old, new))


@pytest.mark.parametrize('rel, old, new, pattern', [
    (MULTI, 'if (p == "hip") return 4;', 'if (p == "rdma_hip") return 4;', 'if (p == "hip") return 4;'),
    (MULTI, 'if (p == "hip") return 4;', 'if (p == "hip") return kHipPriority;', "returns 'kHipPriority'"),
    (IMPL, 'installTransport("hip", nullptr)', 'installTransport("gpu_ipc", nullptr)', 'installTransport("hip", ...)'),
    (IMPL, '#ifdef USE_HIP\n', '#if 1\n', 'is not inside an "#ifdef USE_HIP"'),
    (RDMA_CMAKE, 'add_library(rdma_transport OBJECT', 'add_library(rdma_core OBJECT', 'add_library(rdma_transport ...)'),
])
def test_unknown_layout_fails_before_writing(tmp_path, capsys, rel, old, new, pattern):
    root = tree(tmp_path, 'older')
    _break(root, rel, old, new)
    before = snapshot(root)

    result = run(capsys, dict(src=str(root)), diff=True)

    assert result['failed'] is True
    assert result['msg'].startswith('No file was written.')
    assert rel in result['msg']
    assert pattern in result['msg']
    assert result['file'] == rel
    # The other fixes would have applied, yet nothing was written.
    assert snapshot(root) == before


def test_missing_file_fails_before_writing(tmp_path, capsys):
    root = tree(tmp_path, 'older')
    os.unlink(str(root / RDMA_CMAKE))
    before = snapshot(root)

    result = run(capsys, dict(src=str(root)))

    assert result['failed'] is True
    assert RDMA_CMAKE in result['msg'] and 'file not found' in result['msg']
    assert snapshot(root) == before


def test_src_that_is_not_a_directory(tmp_path, capsys):
    result = run(capsys, dict(src=str(tmp_path / 'nope')))
    assert result['failed'] is True
    assert 'is not a directory' in result['msg']


def test_newer_tree_with_upstream_dmabuf_is_not_applicable(tmp_path, capsys):
    root = tree(tmp_path, 'conditional')
    _break(root, SRC_CMAKE, 'target_compile_definitions(transfer_engine PRIVATE USE_HIP_DMABUF)',
           'target_compile_definitions(rdma_transport PRIVATE USE_HIP_DMABUF)')
    rdma_before = read(root, RDMA_CMAKE)

    result = run(capsys, dict(src=str(root)))

    assert statuses(result)['rdma_dmabuf'] == 'not_applicable'
    assert 'src/CMakeLists.txt' in result['fixes'][2]['detail']
    assert read(root, RDMA_CMAKE) == rdma_before


# --- the pure planning functions ------------------------------------------------------------

def test_guard_only_around_install_changes():
    text = (
        '#ifdef USE_HIP\n'
        '#include "hip/hip_runtime.h"\n'
        '#endif\n'
        'int f() {\n'
        '#if defined(USE_CUDA) || defined(USE_HIP)\n'
        '    allocate();\n'
        '#endif\n'
        '#ifdef USE_HIP  // intra-node\n'
        '    {\n'
        '#ifdef USE_TCP\n'
        '        tcp();\n'
        '#endif\n'
        '        multi_transports_->installTransport("hip", nullptr);\n'
        '    }\n'
        '#endif\n'
        '#ifdef USE_HIP\n'
        '    hipDeviceSynchronize();\n'
        '#endif\n'
        '}\n'
    )
    plan = mp.plan_hip_transport_guard(text)
    assert plan.status == 'applied'
    assert plan.after == text.replace('#ifdef USE_HIP  // intra-node\n', '#ifdef USE_HIP_DISABLED  // intra-node\n')
    assert 'line 8' in plan.detail
    again = mp.plan_hip_transport_guard(plan.after)
    assert again.status == 'already_present'
    assert again.after == plan.after


def test_install_in_else_branch_of_hip_guard_is_unknown_layout():
    text = '#ifdef USE_HIP\n    a();\n#else\n    installTransport("hip", nullptr);\n#endif\n'
    with pytest.raises(mp.PatchTargetError, match='is not inside an "#ifdef USE_HIP"'):
        mp.plan_hip_transport_guard(text)


def test_commented_install_is_ignored():
    text = '// installTransport("hip", nullptr);\nint x;\n'
    with pytest.raises(mp.PatchTargetError, match=r'no line calls installTransport\("hip", \.\.\.\)'):
        mp.plan_hip_transport_guard(text)


@pytest.mark.parametrize('line, status, after', [
    ('    if (p == "hip") return 4;   // HipTransport::priority()\n', 'applied',
     '    if (p == "hip") return 0;   // HipTransport::priority()\n'),
    ('            if (p == "hip")  return std::getenv("MC_DISABLE_HIP") ? 0 : 4;\n', 'applied',
     '            if (p == "hip")  return 0;\n'),
    # What the production shell patch (sed) left behind.
    ('            if (p == "hip") return 0; // patched: rdma priority for cross-node\n', 'already_present', None),
])
def test_priority_forms(line, status, after):
    text = 'auto protocol_priority = [](const std::string& p) {\n' + line + '    return 0;\n};\n'
    plan = mp.plan_hip_priority(text)
    assert plan.status == status
    assert plan.after == (text.replace(line, after) if after else text)


def test_crlf_line_endings_are_kept():
    text = '#ifdef USE_HIP\r\n    installTransport("hip", nullptr);\r\n#endif\r\n'
    assert mp.plan_hip_transport_guard(text).after == text.replace('USE_HIP\r\n', 'USE_HIP_DISABLED\r\n', 1)
    cmake = 'add_library(rdma_transport OBJECT ${SRCS})\r\n'
    assert mp.plan_rdma_dmabuf(cmake).after == cmake + DMABUF_LINE + '\r\n'


@pytest.mark.parametrize('text', [
    'add_library(rdma_transport OBJECT ${SRCS})\n' + DMABUF_LINE + '\n',
    'add_library(rdma_transport OBJECT ${SRCS})\nif(USE_HIP_DMABUF)\n'
    '  target_compile_definitions(rdma_transport PRIVATE USE_HIP_DMABUF)\nendif()\n',
    'add_library(rdma_transport OBJECT ${SRCS})\ntarget_compile_definitions(rdma_transport PRIVATE USE_HIP __HIP_PLATFORM_AMD__\n'
    '                           USE_HIP_DMABUF)\n',
])
def test_dmabuf_already_present(text):
    plan = mp.plan_rdma_dmabuf(text)
    assert plan.status == 'already_present'
    assert plan.after == text


def test_dmabuf_appended_to_file_without_final_newline():
    text = 'add_library(rdma_transport OBJECT ${SRCS})'
    assert mp.plan_rdma_dmabuf(text).after == text + '\n' + DMABUF_LINE + '\n'


def test_symlinked_source_file_stays_a_symlink(tmp_path, capsys):
    root = tree(tmp_path, 'older')
    real = tmp_path / 'shared_multi_transport.cpp'
    shutil.move(str(root / MULTI), str(real))
    os.symlink(str(real), str(root / MULTI))

    result = run(capsys, dict(src=str(root)))

    assert result['changed'] is True
    assert os.path.islink(str(root / MULTI))
    assert PRIORITY_AFTER in real.read_text()
