# Copyright: mindverse
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that read the launch scripts the sglang_service role writes.

Scale-in, scale-out and rolling upgrades run under ``--limit``: the router's host may be
outside the run, so its variables are not at hand. What the router runs is in its launch
script (/etc/sglang-pd/<name>.sh), so these filters read that script, and rewrite only its
``--prefill``/``--decode`` list, leaving every other flag exactly as the role rendered it.
"""
from __future__ import annotations

import base64
import posixpath
import re
import shlex

from ansible.errors import AnsibleFilterError

from ansible_collections.mindverse.sglang_pd.plugins.filter.pd import sglang_router_argv, shell_join

_DIGEST_IMAGE = re.compile(r"^[^-\s][^\s]*@sha256:[0-9a-f]{64}$")
_WORKER_FLAGS = ("--prefill", "--decode")


def _url_host(address):
    """Bracket an IPv6 address for use in a URL."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _split_script(text):
    """Return ``(header_lines, argv)`` of a launch script: comment lines, then ``exec ARGV``."""
    if not isinstance(text, str):
        raise AnsibleFilterError(f"expected the text of a launch script, got {type(text).__name__}")
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("exec "):
            command = "\n".join(lines[index:])[len("exec "):]
            try:
                argv = shlex.split(command.replace("\\\n", " "))
            except ValueError as exc:
                raise AnsibleFilterError(f"cannot parse the launch script's command: {exc}") from exc
            return lines[:index], argv
    raise AnsibleFilterError("the launch script has no 'exec' line: it was not written by the sglang_service role")


def pd_launch_argv(text):
    """The command line (a list) that a launch script execs."""
    return _split_script(text)[1]


def _python_module_index(argv, module):
    """Index of ``module`` after ``-m`` in argv, or None."""
    for index in range(len(argv) - 1):
        if argv[index] == "-m" and argv[index + 1] == module:
            return index + 1
    return None


def _option(argv, flag, start=0):
    """Value after the first ``flag`` (or ``flag=value``) from ``start`` on, or None."""
    for index in range(start, len(argv)):
        if argv[index] == flag and index + 1 < len(argv):
            return argv[index + 1]
        if argv[index].startswith(flag + "="):
            return argv[index][len(flag) + 1:]
    return None


def _image(argv, end):
    for arg in argv[:end]:
        if _DIGEST_IMAGE.match(arg):
            return arg
    return None


def _int_or_none(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def pd_launch_worker(text):
    """What a worker's launch script runs: ``{mode, port, bootstrap_port, image}``.

    Returns None when the script does not run ``python -m sglang.launch_server``
    (the router's script, for example).
    """
    argv = pd_launch_argv(text)
    at = _python_module_index(argv, "sglang.launch_server")
    if at is None:
        return None
    mode = _option(argv, "--disaggregation-mode", at) or "null"
    port = _int_or_none(_option(argv, "--port", at))
    bootstrap = _int_or_none(_option(argv, "--disaggregation-bootstrap-port", at))
    return {
        "mode": mode,
        "port": 30000 if port is None else port,
        "bootstrap_port": (8998 if bootstrap is None else bootstrap) if mode == "prefill" else None,
        "image": _image(argv, at),
    }


def pd_launch_services(files, address):
    """The worker services that launch scripts run, from ``ansible.builtin.slurp`` results.

    ``files`` is a list of ``{source, content}`` (content base64-encoded, as slurp returns
    it); ``address`` is the host's service address (from inventory). Scripts that do not
    run a worker are left out. Each service is ``{name, mode, port, bootstrap_port,
    image, url, path}``; ``name`` is the script's file name without ``.sh`` (the unit name).
    """
    services = []
    for item in files or []:
        if not isinstance(item, dict) or "content" not in item:
            continue
        path = str(item.get("source") or item.get("path") or "")
        try:
            text = base64.b64decode(item["content"]).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise AnsibleFilterError(f"{path}: the content is not base64-encoded UTF-8 text: {exc}") from exc
        worker = pd_launch_worker(text)
        if worker is None:
            continue
        name = posixpath.basename(path)
        name = name[:-3] if name.endswith(".sh") else name
        worker.update(name=name, path=path, url=f"http://{_url_host(str(address))}:{worker['port']}")
        services.append(worker)
    return sorted(services, key=lambda w: w["name"])


def pd_router_worker_spec(worker):
    """A ``pd_workers`` item as the router's worker API takes it: ``{url, worker_type, bootstrap_port}``."""
    try:
        mode, url = worker["mode"], worker["url"]
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError(f"expected a worker with 'mode' and 'url' (pd_workers filter), got {worker!r}") from exc
    spec = {"url": url, "worker_type": mode}
    if mode == "prefill" and worker.get("bootstrap_port") is not None:
        spec["bootstrap_port"] = int(worker["bootstrap_port"])
    return spec


def _worker_block(argv, start):
    """``(first, last)`` indexes of the contiguous --prefill/--decode block after ``start``."""
    first = last = None
    index = start
    while index < len(argv):
        arg = argv[index]
        if arg in _WORKER_FLAGS:
            if first is None:
                first = index
            elif last is not None and last < index:
                raise AnsibleFilterError(
                    "the router's --prefill/--decode flags are not next to each other: "
                    "re-render the router with playbooks/router.yml")
            index += 2  # flag and URL
            if arg == "--prefill" and index < len(argv) and (argv[index].isdigit() or argv[index] == "none"):
                index += 1
            last = index
            continue
        index += 1
    return first, last


def pd_launch_router(text):
    """What a router's launch script runs: ``{port, host, api_key, prefills, decodes, image}``.

    ``prefills`` is a list of ``{url, bootstrap_port}``, ``decodes`` a list of ``{url}``.
    Returns None when the script does not run ``python -m sglang_router.launch_router``.
    """
    argv = pd_launch_argv(text)
    at = _python_module_index(argv, "sglang_router.launch_router")
    if at is None:
        return None
    prefills, decodes = [], []
    index = at + 1
    while index < len(argv):
        arg = argv[index]
        if arg == "--prefill" and index + 1 < len(argv):
            port = None
            step = 2
            if index + 2 < len(argv) and (argv[index + 2].isdigit() or argv[index + 2] == "none"):
                port = _int_or_none(argv[index + 2])
                step = 3
            prefills.append({"url": argv[index + 1], "bootstrap_port": port})
            index += step
            continue
        if arg == "--decode" and index + 1 < len(argv):
            decodes.append({"url": argv[index + 1]})
            index += 2
            continue
        index += 1
    port = _int_or_none(_option(argv, "--port", at))
    return {
        "port": 30000 if port is None else port,
        "host": _option(argv, "--host", at),
        "api_key": _option(argv, "--api-key", at),
        "prefills": prefills,
        "decodes": decodes,
        "image": _image(argv, at),
    }


def pd_launch_with_workers(text, prefills, decodes):
    """The router's launch script with its --prefill/--decode list replaced.

    ``prefills`` and ``decodes`` are workers as the ``pd_workers`` filter returns them.
    Every other line and flag stays as it was, so a later run of the router role,
    rendering the same inventory, writes the same file.
    """
    header, argv = _split_script(text)
    at = _python_module_index(argv, "sglang_router.launch_router")
    if at is None:
        raise AnsibleFilterError("this launch script does not run python -m sglang_router.launch_router")
    wanted = sglang_router_argv(prefills or [], decodes or [], {})
    wanted_block = wanted[wanted.index("--pd-disaggregation") + 1:]
    first, last = _worker_block(argv, at + 1)
    if first is None:
        try:
            first = last = argv.index("--pd-disaggregation", at) + 1
        except ValueError as exc:
            raise AnsibleFilterError("the router's command line has no --pd-disaggregation flag") from exc
    new_argv = argv[:first] + wanted_block + argv[last:]
    return "\n".join(header + ["exec " + shell_join(new_argv)]) + "\n"


class FilterModule:
    """Launch-script filters for scale-out, scale-in and rolling upgrades."""

    def filters(self):
        return {
            "pd_launch_argv": pd_launch_argv,
            "pd_launch_worker": pd_launch_worker,
            "pd_launch_services": pd_launch_services,
            "pd_router_worker_spec": pd_router_worker_spec,
            "pd_launch_router": pd_launch_router,
            "pd_launch_with_workers": pd_launch_with_workers,
        }
