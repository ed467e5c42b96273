# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Find, in a service's log, the attempts to reach a host outside the fleet.

A fleet must not depend on a model hub or any other outside host being reachable (its
nodes may have no route out). ``egress_attempts`` returns the log lines that name a hub
download, or a URL whose host is not one of the fleet's own addresses.
"""
from __future__ import annotations

import ipaddress
import re

from ansible.errors import AnsibleFilterError

# Words a download from a model hub leaves in a log, whatever host it tried.
HUB_WORDS = re.compile(r"huggingface|hf\.co\b|hf-mirror|modelscope|failed to download", re.IGNORECASE)
# Where a program's own code is named (a Rust module path, a source file): SMG logs lines of
# its local tokenizer loader as llm_tokenizer::huggingface (crates/tokenizer/src/huggingface.rs).
CODE_NAMES = re.compile(r"(?:\w+::)+huggingface\b|[\w./-]*huggingface\.rs\b", re.IGNORECASE)
URL_HOST = re.compile(r"\b[a-z][a-z0-9+.-]*://(\[[0-9a-f:.]+\]|[^/\s:\"')\]>,]+)", re.IGNORECASE)
LOCAL_NAMES = {"localhost", "0.0.0.0", "::", "::1"}


def _is_local(host):
    try:
        return ipaddress.ip_address(host).is_loopback or ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host.lower() in LOCAL_NAMES


def egress_attempts(text, allowed_hosts, limit=20):
    """The lines of TEXT that try to reach outside ALLOWED_HOSTS (addresses or names).

    A line counts when it names a model-hub download (a hub's name outside the names of a
    program's own code), or a URL whose host is neither in ``allowed_hosts`` nor a loopback or
    unspecified address. At most ``limit`` lines.
    """
    if text is None:
        return []
    if not isinstance(text, str):
        raise AnsibleFilterError(f"egress_attempts expects log text, got {type(text).__name__} [SGLPD-DEF-001]")
    allowed = {str(h).strip("[]").lower() for h in (allowed_hosts or []) if h}
    found = []
    for line in text.splitlines():
        hosts = [h.strip("[]").lower() for h in URL_HOST.findall(line)]
        outside = [h for h in hosts if h not in allowed and not _is_local(h)]
        if HUB_WORDS.search(CODE_NAMES.sub("", line)) or outside:
            found.append(line.strip()[:400])
            if len(found) >= int(limit):
                break
    return found


class FilterModule:
    """Log audit filters."""

    def filters(self):
        return {"egress_attempts": egress_attempts}
