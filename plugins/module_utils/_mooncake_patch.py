# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Source edits that keep Mooncake's cross-node KV transfers on RDMA (private: the API may change).

Every fix is a pure function from the text of one file to a ``FixPlan`` (the
new text, a status and a human-readable detail). ``plan_fixes`` works out all
of them before anything is written; ``run_mooncake_patch_module`` writes the
files only when every target was found and the module is not in check mode.

The fixes (see docs/mooncake.md):

``hip_transport_guard``
    ``transfer_engine_impl.cpp``: the one ``#ifdef USE_HIP`` whose block calls
    ``installTransport("hip", ...)`` becomes ``#ifdef USE_HIP_DISABLED``. Every
    other ``USE_HIP`` guard stays.
``hip_priority``
    ``multi_transport.cpp``: the HIP entry of the multi-protocol priority
    lambda returns 0 (RDMA is 2) instead of 4, whether it was the older literal
    ``return 4;`` or the newer ``std::getenv("MC_DISABLE_HIP") ? 0 : 4``.
``rdma_dmabuf``
    ``transport/rdma_transport/CMakeLists.txt`` gains
    ``target_compile_definitions(rdma_transport PRIVATE USE_HIP_DMABUF)`` once.
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile

from ansible.module_utils.common.text.converters import to_native

ENGINE_DIR = 'mooncake-transfer-engine'
TRANSFER_ENGINE_IMPL = ENGINE_DIR + '/src/transfer_engine_impl.cpp'
MULTI_TRANSPORT = ENGINE_DIR + '/src/multi_transport.cpp'
RDMA_CMAKELISTS = ENGINE_DIR + '/src/transport/rdma_transport/CMakeLists.txt'
SRC_CMAKELISTS = ENGINE_DIR + '/src/CMakeLists.txt'

FIX_NAMES = ('hip_transport_guard', 'hip_priority', 'rdma_dmabuf')

APPLIED = 'applied'
ALREADY_PRESENT = 'already_present'
NOT_APPLICABLE = 'not_applicable'

DMABUF_LINE = 'target_compile_definitions(rdma_transport PRIVATE USE_HIP_DMABUF)'

# --- hip_transport_guard ----------------------------------------------------
_INSTALL_HIP_RE = re.compile(r'installTransport\s*\(\s*"hip"')
_INSTALL_HIP_PATTERN = 'installTransport("hip", ...)'
# A preprocessor conditional that opens a block: #if, #ifdef, #ifndef.
_PP_OPEN_RE = re.compile(r'^\s*#\s*if(?:n?def)?\b')
_PP_ELSE_RE = re.compile(r'^\s*#\s*(?:else|elif|elifdef|elifndef)\b')
_PP_CLOSE_RE = re.compile(r'^\s*#\s*endif\b')
_HIP_GUARD_RE = re.compile(r'^(?P<head>\s*#\s*ifdef\s+)(?P<macro>USE_HIP(?:_DISABLED)?)(?P<tail>(?:\s.*)?)$', re.DOTALL)

# --- hip_priority -----------------------------------------------------------
_HIP_PRIORITY_RE = re.compile(
    r'^(?P<head>\s*if\s*\(\s*p\s*==\s*"hip"\s*\)\s*return\s+)'
    r'(?P<expr>[^;]*?)'
    r'(?P<tail>\s*;.*)$',
    re.DOTALL,
)
_PRIORITY_STYLES = (
    # (regex on the returned expression, style name, needs a change)
    (re.compile(r'^4$'), 'older literal', True),
    (re.compile(r'^std::getenv\s*\(\s*"MC_DISABLE_HIP"\s*\)\s*\?\s*0\s*:\s*4$'), 'conditional on MC_DISABLE_HIP', True),
    (re.compile(r'^0$'), 'patched', False),
)
_PRIORITY_PATTERNS = ('if (p == "hip") return 4;',
                      'if (p == "hip") return std::getenv("MC_DISABLE_HIP") ? 0 : 4;')

# --- rdma_dmabuf ------------------------------------------------------------
_DMABUF_ON_RDMA_RE = re.compile(
    r'target_compile_definitions\s*\(\s*rdma_transport\b[^)]*\bUSE_HIP_DMABUF\b[^)]*\)')
_RDMA_LIBRARY_RE = re.compile(r'add_library\s*\(\s*rdma_transport\b')
_RDMA_LIBRARY_PATTERN = 'add_library(rdma_transport ...)'


class PatchTargetError(Exception):
    """A fix cannot find what it must edit: the tree has a layout this module does not know."""

    def __init__(self, fix, path, msg):
        self.fix = fix
        self.path = path
        super().__init__('%s: %s: %s' % (fix, path, msg))


class FixPlan:
    """What one fix does to one file."""

    def __init__(self, name, path, status, detail, before, after):
        self.name = name
        self.path = path
        self.status = status
        self.detail = detail
        self.before = before
        self.after = after

    @property
    def changed(self):
        return self.before != self.after

    def result(self):
        return dict(name=self.name, file=self.path, status=self.status, detail=self.detail)


def _newline_of(text):
    return '\r\n' if '\r\n' in text else '\n'


def _split(text):
    return text.splitlines(True)


def _strip_eol(line):
    return line.rstrip('\r\n')


def _eol(line):
    return line[len(_strip_eol(line)):]


def plan_hip_transport_guard(text, path=TRANSFER_ENGINE_IMPL):
    """Turn the ``#ifdef USE_HIP`` around ``installTransport("hip", ...)`` into ``#ifdef USE_HIP_DISABLED``."""
    fix = 'hip_transport_guard'
    lines = _split(text)
    stack = []  # [index of the opening line, inside its #else branch]
    guards = {}  # index of the guard line -> line numbers of the installTransport("hip") calls
    calls = []
    for index, line in enumerate(lines):
        if _PP_OPEN_RE.match(line):
            stack.append([index, False])
        elif _PP_ELSE_RE.match(line):
            if stack:
                stack[-1][1] = True
        elif _PP_CLOSE_RE.match(line):
            if stack:
                stack.pop()
        elif _INSTALL_HIP_RE.search(line) and not line.lstrip().startswith('//'):
            calls.append(index + 1)
            for opening, in_else in reversed(stack):
                if not in_else and _HIP_GUARD_RE.match(_strip_eol(lines[opening])):
                    guards.setdefault(opening, []).append(index + 1)
                    break
    if not calls:
        raise PatchTargetError(fix, path, 'no line calls %s; expected one inside an "#ifdef USE_HIP" block. '
                               'This Mooncake version has an unknown layout: patch it by hand or leave this fix out of fixes.'
                               % _INSTALL_HIP_PATTERN)
    unguarded = [n for n in calls if not any(n in found for found in guards.values())]
    if unguarded:
        raise PatchTargetError(fix, path, '%s at line %s is not inside an "#ifdef USE_HIP" (or "#ifdef USE_HIP_DISABLED") block; '
                               'expected the "#ifdef USE_HIP" guard directly around it. Unknown layout: patch it by hand '
                               'or leave this fix out of fixes.' % (_INSTALL_HIP_PATTERN, ', '.join(str(n) for n in unguarded)))
    changed_lines = []
    kept_lines = []
    for opening in sorted(guards):
        match = _HIP_GUARD_RE.match(_strip_eol(lines[opening]))
        if match.group('macro') == 'USE_HIP':
            lines[opening] = match.group('head') + 'USE_HIP_DISABLED' + match.group('tail') + _eol(lines[opening])
            changed_lines.append(opening + 1)
        else:
            kept_lines.append(opening + 1)
    after = ''.join(lines)
    if changed_lines:
        detail = ('line %s: "#ifdef USE_HIP" -> "#ifdef USE_HIP_DISABLED" around %s; other USE_HIP guards unchanged'
                  % (', '.join(str(n) for n in changed_lines), _INSTALL_HIP_PATTERN))
        if kept_lines:
            detail += '; line %s was already USE_HIP_DISABLED' % ', '.join(str(n) for n in kept_lines)
        status = APPLIED
    else:
        detail = 'line %s: %s is already guarded by "#ifdef USE_HIP_DISABLED"' % (
            ', '.join(str(n) for n in kept_lines), _INSTALL_HIP_PATTERN)
        status = ALREADY_PRESENT
    return FixPlan(fix, path, status, detail, text, after)


def plan_hip_priority(text, path=MULTI_TRANSPORT):
    """Make the HIP entry of the protocol priority lambda return 0 (below RDMA's 2)."""
    fix = 'hip_priority'
    lines = _split(text)
    found = []  # (line number, style, changed)
    unknown = []
    for index, line in enumerate(lines):
        match = _HIP_PRIORITY_RE.match(_strip_eol(line))
        if not match:
            continue
        expr = match.group('expr').strip()
        for style_re, style, needs_change in _PRIORITY_STYLES:
            if style_re.match(expr):
                break
        else:
            unknown.append('line %d returns %r' % (index + 1, expr))
            continue
        if needs_change:
            lines[index] = match.group('head') + '0' + match.group('tail') + _eol(line)
        found.append((index + 1, style, needs_change, expr))
    if unknown:
        raise PatchTargetError(fix, path, 'the HIP priority has a form this module does not know (%s); expected %s or %s. '
                               'Unknown layout: patch it by hand or leave this fix out of fixes.'
                               % ('; '.join(unknown), _PRIORITY_PATTERNS[0], _PRIORITY_PATTERNS[1]))
    if not found:
        raise PatchTargetError(fix, path, 'no HIP priority line found; looked for %s (older literal) or %s '
                               '(conditional on MC_DISABLE_HIP). Unknown layout: patch it by hand or leave this fix out of fixes.'
                               % _PRIORITY_PATTERNS)
    changes = ['line %d (%s): "return %s;" -> "return 0;"' % (n, style, expr)
               for n, style, needs_change, expr in found if needs_change]
    after = ''.join(lines)
    if changes:
        return FixPlan(fix, path, APPLIED, 'HIP priority set to 0, below RDMA (2); ' + '; '.join(changes), text, after)
    return FixPlan(fix, path, ALREADY_PRESENT, 'line %s: HIP priority is already 0'
                   % ', '.join(str(item[0]) for item in found), text, after)


def plan_rdma_dmabuf(text, path=RDMA_CMAKELISTS, src_cmakelists_text=None):
    """Append the USE_HIP_DMABUF definition to the rdma_transport target once.

    ``src_cmakelists_text`` is the text of ``src/CMakeLists.txt`` (or None): newer
    Mooncake (kvcache-ai/Mooncake #2725) sets the definition on rdma_transport
    there, and then this fix is not applicable.
    """
    fix = 'rdma_dmabuf'
    match = _DMABUF_ON_RDMA_RE.search(text)
    if match:
        line = text.count('\n', 0, match.start()) + 1
        return FixPlan(fix, path, ALREADY_PRESENT, 'line %d already defines USE_HIP_DMABUF on rdma_transport' % line, text, text)
    if src_cmakelists_text is not None and _DMABUF_ON_RDMA_RE.search(src_cmakelists_text):
        return FixPlan(fix, path, NOT_APPLICABLE, '%s already defines USE_HIP_DMABUF on rdma_transport (newer Mooncake); '
                       'nothing to add' % SRC_CMAKELISTS, text, text)
    if not _RDMA_LIBRARY_RE.search(text):
        raise PatchTargetError(fix, path, 'the rdma_transport target is not defined here; looked for %s. '
                               'Unknown layout: patch it by hand or leave this fix out of fixes.' % _RDMA_LIBRARY_PATTERN)
    newline = _newline_of(text)
    after = text
    if after and not after.endswith('\n'):
        after += newline
    after += DMABUF_LINE + newline
    line = after.count('\n')
    return FixPlan(fix, path, APPLIED, 'appended %s at line %d' % (DMABUF_LINE, line), text, after)


def _read(root, rel, fix, required=True):
    full = os.path.join(root, rel)
    if not os.path.isfile(full):
        if not required:
            return None
        raise PatchTargetError(fix, rel, 'file not found under %s; src must be the Mooncake repository root '
                               '(the directory that holds %s/)' % (root, ENGINE_DIR))
    try:
        with open(full, 'rb') as handle:
            data = handle.read()
    except (IOError, OSError) as exc:
        raise PatchTargetError(fix, rel, 'cannot read: %s' % to_native(exc))
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError as exc:
        raise PatchTargetError(fix, rel, 'not UTF-8 text (%s)' % to_native(exc))


def plan_fixes(root, fixes=FIX_NAMES):
    """Read the tree under ``root`` and work out every requested fix; raises PatchTargetError before any write."""
    plans = []
    for name in FIX_NAMES:
        if name not in fixes:
            continue
        if name == 'hip_transport_guard':
            plans.append(plan_hip_transport_guard(_read(root, TRANSFER_ENGINE_IMPL, name)))
        elif name == 'hip_priority':
            plans.append(plan_hip_priority(_read(root, MULTI_TRANSPORT, name)))
        else:
            text = _read(root, RDMA_CMAKELISTS, name)
            plans.append(plan_rdma_dmabuf(text, src_cmakelists_text=_read(root, SRC_CMAKELISTS, name, required=False)))
    return plans


def write_atomic(module, path, text):
    """Write ``text`` to ``path`` through a temporary file in the same directory, keeping the mode."""
    path = os.path.realpath(path)  # a symlinked source file keeps being a symlink
    directory = os.path.dirname(path)
    mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix='.mooncake_patch.', dir=directory)
    try:
        with os.fdopen(fd, 'wb') as handle:
            handle.write(text.encode('utf-8'))
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _unified(plan):
    return ''.join(difflib.unified_diff(_split(plan.before), _split(plan.after),
                                        'a/' + plan.path, 'b/' + plan.path))


def _merge_by_file(plans):
    """Return [(relative path, before, after)] of the files whose text changes, in fix order."""
    files = {}
    for plan in plans:
        entry = files.setdefault(plan.path, [plan.before, plan.before])
        if plan.changed:
            if entry[1] != plan.before:
                raise PatchTargetError(plan.name, plan.path, 'internal error: two fixes edit this file')
            entry[1] = plan.after
    return [(rel, before, after) for rel, (before, after) in files.items() if before != after]


def run_mooncake_patch_module(module):
    root = module.params['src']
    if not os.path.isdir(root):
        module.fail_json(msg='src %s is not a directory; expected the Mooncake repository root (the directory that holds %s/) [SGLPD-TRN-001]'
                         % (root, ENGINE_DIR), fixes=[])
        return
    try:
        plans = plan_fixes(root, module.params['fixes'])
        changed_files = _merge_by_file(plans)
    except PatchTargetError as exc:
        module.fail_json(msg='No file was written. %s [SGLPD-TRN-002]' % to_native(exc), fixes=[], file=exc.path, fix=exc.fix)
        return

    if not module.check_mode:
        blocked = [rel for rel, dummy, dummy2 in changed_files
                   if not os.access(os.path.dirname(os.path.realpath(os.path.join(root, rel))), os.W_OK)]
        if blocked:
            module.fail_json(msg='No file was written. Cannot write into the directory of %s; run as a user that owns the '
                             'Mooncake tree (or with become). [SGLPD-TRN-003]' % ', '.join(blocked), fixes=[p.result() for p in plans])
            return
        for rel, dummy, after in changed_files:
            write_atomic(module, os.path.join(root, rel), after)

    result = dict(
        changed=bool(changed_files),
        src=root,
        fixes=[plan.result() for plan in plans],
        patch=''.join(_unified(plan) for plan in plans if plan.changed),
    )
    if module._diff:
        result['diff'] = [dict(before_header=rel, after_header=rel, before=before, after=after)
                          for rel, before, after in changed_files]
    module.exit_json(**result)
