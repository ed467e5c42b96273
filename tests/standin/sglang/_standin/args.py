"""Command line of ``python -m sglang.launch_server``, as far as the stand-in needs it.

Flag names, aliases, defaults and choices follow sglang/srt/server_args.py (0.5.14).
Any other SGLang flag is accepted and ignored (``parse_known_args``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DISAGGREGATION_MODES = ("null", "prefill", "decode")
TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")
KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")

MAX_PORT = 65535
ENV_WARMUP = "SGLANG_STANDIN_WARMUP_SECS"
ENV_TOKEN_DELAY = "SGLANG_STANDIN_TOKEN_DELAY_SECS"
# SGLang's own variable and default (sglang/srt/environ.py, 0.5.14): how long decode waits
# for a request's KV cache from prefill. The stand-in waits that long for the bootstrap server.
ENV_WAITING_TIMEOUT = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT"
WAITING_TIMEOUT_DEFAULT = 300.0


@dataclass(frozen=True)
class StandinOptions:
    """Stand-in behaviour read from the environment (not SGLang server args)."""

    warmup_secs: float
    token_delay_secs: float
    waiting_timeout_secs: float = WAITING_TIMEOUT_DEFAULT


def build_parser() -> argparse.ArgumentParser:
    """Return the parser for the SGLang flags the stand-in uses."""
    parser = argparse.ArgumentParser(
        prog="python -m sglang.launch_server",
        description="CPU stand-in for the SGLang server (tests only). Unknown SGLang flags are ignored.",
    )
    add = parser.add_argument
    add("--model-path", "--model", dest="model_path", required=True,
        help="model directory: must hold config.json (nothing else is read)")
    add("--tokenizer-path", dest="tokenizer_path", default=None, help="defaults to --model-path")
    add("--served-model-name", dest="served_model_name", default=None, help="defaults to --model-path")
    add("--host", default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    add("--trust-remote-code", action="store_true")
    add("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES)
    add("--attention-backend", default=None)
    add("--disaggregation-mode", default="null", choices=DISAGGREGATION_MODES)
    add("--disaggregation-bootstrap-port", type=int, default=8998)
    add("--disaggregation-transfer-backend", default="mooncake", choices=TRANSFER_BACKENDS)
    add("--disaggregation-ib-device", default=None)
    add("--api-key", dest="api_key", default=None, help="required on every endpoint but /health* and /metrics")
    add("--admin-api-key", dest="admin_api_key", default=None, help="required instead on admin endpoints (/flush_cache)")
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


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[argparse.Namespace, list[str], StandinOptions]:
    """Parse argv like SGLang; return (server args, ignored flags, stand-in options).

    Exits with code 2 on invalid input, as SGLang's argparse does.
    """
    parser = build_parser()
    args, ignored = parser.parse_known_args(argv)
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
    )
    return args, ignored, options
