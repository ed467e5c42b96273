# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What playbooks/support_bundle.yml may write: every text redacted, then cut to a size.

``hosts | mindverse.sglang_pd.support_secrets(hostvars)`` lists the secret values of the
inventory: each collection variable whose argument spec says ``no_log`` or whose name says
key, token, password, secret or credential (SECRET_VARIABLE), and, inside
any collection variable that is a mapping or list (``sglang_worker_extra_env``), each value
under a key whose name says secret.

``text | mindverse.sglang_pd.support_redact(secrets)`` replaces each of those values, then
what looks like a secret whatever its value: an Authorization header, a bearer token, the
value of a flag, variable, JSON or YAML key whose name says key, token, password, secret or
credential, a password in a URL, a signature or token in a URL's query.

The ``support_*_texts`` filters turn what a task read into the bundle's files: ``{file name: text}``,
a command's line, exit code and output, or what kept it from answering ("not present on this
node" for a tool that is not installed).

``text | mindverse.sglang_pd.support_tail(max_bytes)`` keeps the last MAX_BYTES bytes (a log's
end is where the trouble is), saying how much was cut.
"""
from __future__ import annotations

import base64
import functools
import glob
import json
import os
import re
from collections.abc import Mapping

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._layout import VARIABLE_PREFIXES
from ansible_collections.mindverse.sglang_pd.plugins.plugin_utils.service_plan import REDACTED

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# A value shorter than this is no secret worth the name, and replacing it would blot out the text.
MIN_SECRET_LENGTH = 6
# The name of a flag or key whose value is a secret. "token" not followed by "iz" (tokenizer paths stay).
_NAME = r"[\w.-]*(?:key|token(?!iz)|passw(?:or)?d|passwd|pwd|secret|credential)[\w.-]*"
# A value that is a count or a number (`#token: 120`, `--max-total-tokens 4096`) is kept.
_NOT_A_NUMBER = r"(?![\d.,:]+(?![^\s\"',;&}\]]))"
# The same words name a secret variable, or a secret key inside one (HF_TOKEN); SECRET_NAME (the
# services' rule for what goes into a secret file) also takes "auth", and "token" in a tokenizer path.
SECRET_VARIABLE = re.compile(_NAME, re.I)
PATTERNS = (
    # Authorization: Bearer abc / "authorization": "Basic abc" / Proxy-Authorization.
    (re.compile(r"(authorization[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token|digest)\s+)?[^\s\"',;]+", re.I), r"\1" + REDACTED),
    (re.compile(r"\b(bearer\s+)[A-Za-z0-9._~+/=-]{6,}", re.I), r"\1" + REDACTED),
    # scheme://user:password@host
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s/:@\"']+:)[^\s/@\"']+(@)", re.I), r"\1" + REDACTED + r"\2"),
    # ?sig=... &token=... in a URL's query (a SAS token's place).
    (re.compile(r"([?&](?:sig|signature|" + _NAME + r")=)[^&\s\"'#]+", re.I), r"\1" + REDACTED),
    # --api-key VALUE, --registry-password=VALUE (the next word, unless it is a flag).
    (re.compile(r"(--" + _NAME + r")(=|\s+)(?!-)" + _NOT_A_NUMBER + r"[^\s\"',;]+", re.I), r"\1\2" + REDACTED),
    # API_KEY=value, password: value, "api_key": "value".
    (re.compile(r"((?<![\w-])[\"']?" + _NAME + r"[\"']?\s*[:=]\s*[\"']?)(?![\"'\[{]|" + re.escape(REDACTED) + ")" + _NOT_A_NUMBER
                + r"[^\s\"',;&}\]]+", re.I), r"\1" + REDACTED),
)


@functools.lru_cache(maxsize=1)
def no_log_names():
    """The variables whose argument spec (a role's, or playbooks/vars/sglang_pd_variables.yml) says no_log."""
    specs = {}
    for path in sorted(glob.glob(os.path.join(COLLECTION, "roles", "*", "meta", "argument_specs.yml"))):
        with open(path, encoding="utf-8") as handle:
            for entry_point in (yaml.safe_load(handle) or {}).get("argument_specs", {}).values():
                specs.update(entry_point.get("options") or {})
    with open(os.path.join(COLLECTION, "playbooks", "vars", "sglang_pd_variables.yml"), encoding="utf-8") as handle:
        specs.update((yaml.safe_load(handle) or {}).get("sglang_pd_variables") or {})
    return frozenset(name for name, spec in specs.items() if (spec or {}).get("no_log"))


def _strings(value, whole):
    """The strings in VALUE: all of them when WHOLE, else only those under a key whose name says secret."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, whole or bool(SECRET_VARIABLE.fullmatch(str(key))))
    elif isinstance(value, (list, tuple)):
        for item in value:
            # A list of entries (sglang_router_control_plane_api_keys): only their secret-named keys.
            yield from _strings(item, whole and not isinstance(item, Mapping))
    elif whole and isinstance(value, (str, int)) and not isinstance(value, bool):
        yield str(value)


def support_secrets(hosts, hostvars):
    """The secret values of the collection's variables on HOSTS (see the module docstring), longest first."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError(f"support_secrets expects a list of hosts, got {type(hosts).__name__} [SGLPD-DEF-001]")
    secret_names = no_log_names()
    found = set()
    for host in hosts:
        one = hostvars[host]
        for name in list(one.keys()):
            if not str(name).startswith(VARIABLE_PREFIXES):
                continue
            try:
                value = one[name]
            except Exception:  # pylint: disable=broad-exception-caught  # a variable that does not template holds nothing to redact
                continue
            whole = name in secret_names or bool(SECRET_VARIABLE.fullmatch(name))
            found.update(s for s in _strings(value, whole) if len(s) >= MIN_SECRET_LENGTH)
    return sorted(found, key=lambda s: (-len(s), s))


def support_redact(text, secrets=None):
    """TEXT with every value of SECRETS, and every secret-shaped value (PATTERNS), replaced by <redacted>.

    TEXT may be a mapping of file names to texts (each text redacted).
    """
    if isinstance(text, Mapping):
        return {name: support_redact(value, secrets) for name, value in text.items()}
    if text is None:
        return ""
    if not isinstance(text, str):
        raise AnsibleFilterError(f"support_redact expects text, got {type(text).__name__} [SGLPD-DEF-001]")
    for secret in sorted({str(s) for s in (secrets or []) if len(str(s)) >= MIN_SECRET_LENGTH}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for pattern, replacement in PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def support_tail(text, max_bytes):
    """The last MAX_BYTES bytes of TEXT (UTF-8), after a line saying how many bytes were cut (a mapping: each text)."""
    if isinstance(text, Mapping):
        return {name: support_tail(value, max_bytes) for name, value in text.items()}
    try:
        limit = int(max_bytes)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"support_tail expects a number of bytes, got {max_bytes!r} [SGLPD-DEF-001]") from exc
    data = str(text or "").encode("utf-8", "surrogateescape")
    if len(data) <= limit:
        return str(text or "")
    kept = data[len(data) - limit:].decode("utf-8", "ignore")
    return f"[support bundle: the first {len(data) - limit} bytes cut, the last {limit} kept]\n{kept}"


def _command_text(result):
    item = result.get("item")
    argv = item.get("argv") if isinstance(item, Mapping) else result.get("cmd")
    argv = argv if isinstance(argv, list) else str(argv or "").split()
    line = "$ " + " ".join(str(a) for a in argv)
    out, err = result.get("stdout") or "", result.get("stderr") or ""
    # A program that could not be started: no exit code of its own, no output, and not the
    # command module's "non-zero return code" (ansible-core says "Error executing command.").
    if result.get("rc") is None or (result.get("rc") != 0 and not out and not err
                                    and result.get("msg") not in (None, "", "non-zero return code")):
        program = argv[0] if argv else "the command"
        return f"{line}\nnot present on this node: {program} ({result.get('msg') or 'not run'})\n"
    return f"{line}\n(exit code {result['rc']})\n{out}\n" + (f"--- stderr\n{err}\n" if err else "")


def support_command_texts(results, prefix="", suffix=""):
    """``{file: text}`` of a looped command's RESULTS: the item's ``file``, or PREFIX + item + SUFFIX."""
    texts = {}
    for result in results or []:
        item = result.get("item")
        name = item.get("file") if isinstance(item, Mapping) else f"{prefix}{item}{suffix}"
        texts[name] = _command_text(result)
    return texts


def support_file_texts(results, prefix="files/"):
    """``{PREFIX + file name: its text}`` of a looped slurp's RESULTS (a missing file says so)."""
    texts = {}
    for result in results or []:
        path = str(result.get("item") or result.get("source") or "")
        if result.get("content") is not None:
            texts[prefix + os.path.basename(path)] = base64.b64decode(result["content"]).decode("utf-8", "replace")
        else:
            texts[prefix + os.path.basename(path) + ".missing"] = f"{path}: not read ({result.get('msg', 'not on this node')})\n"
    return texts


def support_result_text(result, key):
    """RESULT[KEY] as JSON, or why the task did not give it (skipped, failed)."""
    result = result or {}
    if result.get("skipped"):
        return "not read: " + str(result.get("skip_reason") or "skipped") + "\n"
    if key not in result:
        return "not read: " + str(result.get("msg") or "no answer") + "\n"
    value = result[key]
    return value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"


def support_docker_text(result):
    """The Docker daemon's info and the SGLang containers docker_host_info read, as JSON (or why not)."""
    result = result or {}
    if "host_info" not in result:
        return "Docker not read: " + str(result.get("msg") or "no answer") + "\n"
    shown = {"host_info": result.get("host_info"), "containers": result.get("containers", [])}
    return json.dumps(shown, indent=2, sort_keys=True, default=str) + "\n"


class FilterModule:
    """Support bundle filters."""

    def filters(self):
        return {"support_secrets": support_secrets, "support_redact": support_redact, "support_tail": support_tail,
                "support_command_texts": support_command_texts, "support_file_texts": support_file_texts,
                "support_result_text": support_result_text, "support_docker_text": support_docker_text}
