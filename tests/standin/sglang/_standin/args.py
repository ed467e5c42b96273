"""Command line of ``python -m sglang.launch_server``, as SGLang 0.5.14 parses it.

The parser is built from the pinned flag table (``server_flags``: a link to the collection's
plugins/module_utils/_sglang_flags_v0_5_14.py, generated from sglang/srt/server_args.py), so
the stand-in takes exactly the flags SGLang takes: an unknown flag, a bad choice or a value
of the wrong type exits 2 with argparse's message, as SGLang does. Defaults are SGLang's.
The stand-in acts on a few of them (address, ports, model, PD mode, keys, metrics); the
others are parsed and have no effect.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sglang._standin import kv_transfer, receiver, server_flags

MAX_PORT = 65535
ENV_WARMUP = "SGLANG_STANDIN_WARMUP_SECS"
# Like SGLang, which loads the model before its HTTP server starts: connections are refused.
ENV_LOAD = "SGLANG_STANDIN_LOAD_SECS"
ENV_TOKEN_DELAY = "SGLANG_STANDIN_TOKEN_DELAY_SECS"
# SGLang's own variable and default (sglang/srt/environ.py, 0.5.14): how long decode waits
# for a request's KV cache from prefill (receiver.py).
ENV_WAITING_TIMEOUT = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
WAITING_TIMEOUT_DEFAULT = 300.0
# SGLang's own (http_server.py, 0.5.14): seconds a health check waits for its one token.
ENV_HEALTH_TIMEOUT = "SGLANG_HEALTH_CHECK_TIMEOUT"
# How often SGLang's SIGTERM watchdog looks (tokenizer_manager.py: asyncio.sleep(5)); tests shorten it.
ENV_EXIT_POLL = "SGLANG_STANDIN_EXIT_POLL_SECS"
_CONVERTERS = {"int": int, "float": float, "str": str}


@dataclass(frozen=True)
class StandinOptions:
    """Stand-in behaviour read from the environment (not SGLang server args)."""

    warmup_secs: float
    token_delay_secs: float
    waiting_timeout_secs: float = WAITING_TIMEOUT_DEFAULT
    load_secs: float = 0.0
    health_timeout_secs: float = 20.0
    exit_poll_secs: float = 5.0
    # Decode: seconds between its tries to reach a prefill's bootstrap server (SGLang's 1 s).
    bootstrap_retry_secs: float = receiver.ENSURE_RETRY_SECS
    # Prefill: the KV fault it plays (kv_transfer.FAULTS), or "" for none.
    kv_fault: str = ""
    kv_fault_max_pages: int = kv_transfer.MAX_PAGES_DEFAULT
    slow_transfer_secs: float = kv_transfer.SLOW_TRANSFER_DEFAULT


def _switch_dest(flag: str, dest: str) -> str:
    """The dest of a switch: its own when the table's dest holds a value (a deprecated spelling)."""
    kinds = {kind for _flag, (one, kind, _choices, _new) in server_flags.FLAGS.items() if one == dest}
    return dest if kinds == {"switch"} else "deprecated_" + flag.lstrip("-").replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every SGLang 0.5.14 server flag (server_flags), with SGLang's defaults."""
    parser = argparse.ArgumentParser(
        prog="python -m sglang.launch_server",
        description="CPU stand-in for the SGLang server (tests only), taking SGLang 0.5.14's flags.",
    )
    for flag, (dest, kind, choices, _replacement) in sorted(server_flags.FLAGS.items()):
        if kind == "switch":
            parser.add_argument(flag, dest=_switch_dest(flag, dest), action="store_true")
            continue
        kwargs = {"dest": dest, "type": _CONVERTERS[server_flags.TYPES.get(dest, "str")]}
        if choices:
            kwargs["choices"] = choices
        if kind == "optional":
            kwargs["nargs"] = "?"
        elif kind == "list":
            kwargs["nargs"] = "+"
        parser.add_argument(flag, **kwargs)
    dests = {dest for dest, _kind, _choices, _new in server_flags.FLAGS.values()}
    parser.set_defaults(**{dest: value for dest, value in server_flags.DEFAULTS.items() if dest in dests})
    return parser


def model_path_error(model_path: str) -> str | None:
    """SGLang's error when model_path is not a directory holding config.json, else None.

    Real SGLang reads the model's config.json with transformers at start, which raises
    ``OSError: <path> does not appear to have a file named config.json.`` for a local path
    without one. The stand-in reads nothing else from the directory.
    """
    if os.path.isdir(model_path) and os.path.isfile(os.path.join(model_path, "config.json")):
        return None
    return f"OSError: {model_path} does not appear to have a file named config.json."


def _check_port(parser: argparse.ArgumentParser, flag: str, value: int) -> None:
    """Exit 2 (argparse error) unless value is a usable TCP port."""
    if not 0 < value <= MAX_PORT:
        parser.error(f"{flag} must be between 1 and {MAX_PORT}, got {value}")


def _env_seconds(parser: argparse.ArgumentParser, environ: Mapping[str, str], name: str, default: float) -> float:
    """Read a non-negative number of seconds from the environment, or exit 2."""
    raw = environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        parser.error(f"{name} must be a number of seconds >= 0, got {raw!r}")
    return value


def _env_pages(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> int:
    """The pages a transfer may have under the long_transfer_fails fault (SGLANG_STANDIN_KV_FAULT_MAX_PAGES), or exit 2."""
    raw = environ.get(kv_transfer.ENV_MAX_PAGES, "").strip()
    if not raw:
        return kv_transfer.MAX_PAGES_DEFAULT
    if not raw.isdigit():
        parser.error(f"{kv_transfer.ENV_MAX_PAGES} must be a number of pages >= 0, got {raw!r}")
    return int(raw)


def _kv_fault(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> str:
    """The KV fault SGLANG_STANDIN_KV_FAULT names ("" for none), or exit 2."""
    fault = environ.get(kv_transfer.ENV_FAULT, "").strip()
    if fault and fault not in kv_transfer.FAULTS:
        parser.error(f"{kv_transfer.ENV_FAULT} must be one of {', '.join(kv_transfer.FAULTS)}, got {fault!r}")
    return fault


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[argparse.Namespace, StandinOptions]:
    """Parse argv like SGLang 0.5.14; return (server args, stand-in options).

    Exits with code 2 on invalid input (an unknown flag, a bad choice or type, no
    --model-path), as SGLang's argparse does.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model_path is None:
        parser.error("the following arguments are required: --model-path/--model")
    if args.disaggregation_mode == "prefill" and args.disaggregation_transfer_backend == "fake":
        parser.error("--disaggregation-transfer-backend fake is not supported in prefill mode (decode only)")
    _check_port(parser, "--port", args.port)
    _check_port(parser, "--disaggregation-bootstrap-port", args.disaggregation_bootstrap_port)
    args.tokenizer_path = args.tokenizer_path or args.model_path
    args.served_model_name = args.served_model_name or args.model_path
    env = os.environ if environ is None else environ
    options = StandinOptions(
        warmup_secs=_env_seconds(parser, env, ENV_WARMUP, 2.0),
        token_delay_secs=_env_seconds(parser, env, ENV_TOKEN_DELAY, 0.0),
        waiting_timeout_secs=_env_seconds(parser, env, ENV_WAITING_TIMEOUT, WAITING_TIMEOUT_DEFAULT),
        load_secs=_env_seconds(parser, env, ENV_LOAD, 2.0),
        health_timeout_secs=_env_seconds(parser, env, ENV_HEALTH_TIMEOUT, 20.0),
        exit_poll_secs=_env_seconds(parser, env, ENV_EXIT_POLL, 5.0),
        bootstrap_retry_secs=_env_seconds(parser, env, receiver.ENV_ENSURE_RETRY, receiver.ENSURE_RETRY_SECS),
        kv_fault=_kv_fault(parser, env),
        slow_transfer_secs=_env_seconds(parser, env, kv_transfer.ENV_SLOW_TRANSFER, kv_transfer.SLOW_TRANSFER_DEFAULT),
        kv_fault_max_pages=_env_pages(parser, env),
    )
    return args, options
