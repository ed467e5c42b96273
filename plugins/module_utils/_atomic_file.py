# Copyright: (c) 2026, mindverse infrastructure team
# Apache License 2.0, compatible with the GNU General Public License v3.0+ (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Write a file whole or not at all: a temporary file beside it, renamed over it.

A reader (or a run cut short) sees the old content or the new, never half of it.
Used by file_set, settled_state, model_weights and the image verification cache.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


@contextlib.contextmanager
def staged(target, data, mode, uid=-1, gid=-1, folder_mode=0o755):
    """A temporary file beside TARGET holding DATA (bytes) with MODE and owner, for the block to check.

    The folder is made (with FOLDER_MODE) when missing. The file is renamed over TARGET when the
    block ends without error, and removed when anything raises.
    """
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, mode=folder_mode, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=folder, prefix='.%s.' % os.path.basename(target), suffix='.tmp')
    try:
        with os.fdopen(handle, 'wb') as out:
            out.write(data)
        os.chmod(temp, mode)
        if uid != -1 or gid != -1:
            os.chown(temp, uid, gid)
        yield temp
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def write_atomically(target, data, mode, folder_mode=0o755):
    """Replace TARGET with DATA (bytes, or text written as UTF-8) and MODE in one rename."""
    if isinstance(data, str):
        data = data.encode('utf-8')
    with staged(target, data, mode, folder_mode=folder_mode):
        pass
