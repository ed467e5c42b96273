"""Entry point of the stand-in: ``python -m sglang.launch_server [SGLang flags]``.

Tests only: serves SGLang's HTTP API on CPU with deterministic replies. Like
SGLang 0.5.14 it exits 2 on a flag it does not take (or a bad choice), and 1 at start,
before listening, when --model-path is not a directory
holding config.json (the only file of it the stand-in reads). In prefill mode it
also serves its bootstrap server on --disaggregation-bootstrap-port and a KV transfer
listener on a free port, which it registers there. SIGTERM or SIGINT stop it
gracefully: no new connections, in-flight requests finish, exit 0.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

from sglang import __version__
from sglang._standin.args import model_path_error, parse_args
from sglang._standin.httpd import StandinHTTPServer
from sglang._standin.bootstrap import BootstrapServer, register_ranks, registration, start_bootstrap
from sglang._standin.kv_transfer import ENV_FAULT, MAX_PAGES_DEFAULT, TransferServer, start_transfer, stop_transfer
from sglang._standin.receiver import DecodeSettings
from sglang._standin.state import ServerState, log
from sglang._standin.transport import chosen, print_engine_lines


def _install_signal_handlers(state: ServerState, stop: threading.Event, advance: threading.Event) -> None:
    """SIGTERM (systemd, docker stop): SGLang's graceful exit (health 503, serve until no request is
    left); SIGINT: stop at once. SIGUSR1 sets advance (tests: end the model load or the warm-up now,
    so that they wait on an event rather than a clock). SIGUSR2 stalls the scheduler, or resumes
    it (a fault: HTTP answers, no token comes out)."""

    def _on_term(signum: int, _frame: FrameType | None) -> None:
        log(f"received {signal.Signals(signum).name}: draining requests and shutting down (health answers 503)")
        state.exiting = True

    def _on_int(signum: int, _frame: FrameType | None) -> None:
        log(f"received {signal.Signals(signum).name}: stop accepting, finish in-flight requests, exit")
        stop.set()

    def _on_advance(_signum: int, _frame: FrameType | None) -> None:
        advance.set()

    def _on_stall(_signum: int, _frame: FrameType | None) -> None:
        log("scheduler stalled: no token comes out, HTTP still answers" if state.toggle_stall() else "scheduler resumed")

    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_int)
    signal.signal(signal.SIGUSR1, _on_advance)
    signal.signal(signal.SIGUSR2, _on_stall)


def _drained(httpd: StandinHTTPServer, poll: float, stop: threading.Event) -> bool:
    """SGLang's SIGTERM watchdog: it looks every poll seconds, and exits once no request is left."""
    stop.wait(poll)
    remaining = httpd.in_flight.value
    log(f"Gracefully exiting... Remaining number of requests {remaining}.")
    return remaining == 0 or stop.is_set()


def _wait(seconds: float, done: Callable[[], bool], advance: threading.Event) -> None:
    """Wait seconds, or until done() or advance is set (advance is cleared for the next phase)."""
    deadline = time.monotonic() + seconds
    while not done() and not advance.is_set() and time.monotonic() < deadline:
        advance.wait(min(0.1, max(deadline - time.monotonic(), 0)))
    advance.clear()


def _start_prefill_kv(state: ServerState, fault: str, slow_secs: float,
                      max_pages: int = MAX_PAGES_DEFAULT) -> tuple[BootstrapServer | None, TransferServer]:
    """Prefill: its KV sender, its bootstrap server (CommonKVBootstrapServer), and the registration of its ranks.

    SGLang registers each rank with rank_ip, the node's address; the stand-in registers the
    address it listens on (a wildcard: local_ip()). The bootstrap_unreachable fault leaves the
    bootstrap server out, as when SGLang's failed to start (it logs and serves on).
    """
    args = state.args
    # The KV goes in pages of --page-size tokens (SGLang 0.5.14's default 1), the size the ranks register.
    transfer = start_transfer(args.host, state.rooms, fault, slow_secs, lambda line: log(f"error: {line}"),
                              state.count_kv_transfer, int(args.page_size or 1), max_pages)
    if fault == "bootstrap_unreachable":
        log(f"fault {ENV_FAULT}=bootstrap_unreachable: no bootstrap server on port {args.disaggregation_bootstrap_port}")
        return None, transfer
    bootstrap = start_bootstrap(args.host, args.disaggregation_bootstrap_port, state.count_bootstrap_connection)
    rank_ip = local_ip() if args.host in ("0.0.0.0", "::") else args.host
    rank_port = int(transfer.server_address[1])
    payloads = [registration(args, rank_ip, rank_port, tp_rank, pp_rank)
                for pp_rank in range(int(args.pp_size)) for tp_rank in range(int(args.tp_size))]
    register_ranks(rank_ip, args.disaggregation_bootstrap_port, payloads, lambda line: log(f"error: {line}"))
    return bootstrap, transfer


def local_ip() -> str:
    """get_local_ip_auto (sglang/srt/utils/network.py): SGLANG_HOST_IP or HOST_IP, else the address
    of the interface that routes outward (no packet is sent), else loopback."""
    given = os.environ.get("SGLANG_HOST_IP", "") or os.environ.get("HOST_IP", "")
    if given:
        return given
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: connect() on UDP only picks the route
            return str(probe.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in until SIGTERM/SIGINT; return the exit code."""
    args, options = parse_args(argv)
    # Like SGLang, which reads the model's config.json before anything listens: the
    # last line of its traceback, on stderr, and exit 1.
    model_error = model_path_error(args.model_path)
    if model_error is not None:
        sys.stderr.write(model_error + "\n")
        sys.stderr.flush()
        return 1
    try:
        chosen(os.environ)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    state = ServerState(args, options.warmup_secs, options.token_delay_secs,
                        health_timeout_secs=options.health_timeout_secs,
                        decode_settings=DecodeSettings(options.waiting_timeout_secs, options.bootstrap_retry_secs))
    stop, advance = threading.Event(), threading.Event()
    _install_signal_handlers(state, stop, advance)
    # Loading the model: nothing listens yet, so connections are refused (as SGLang's are).
    log(f"loading the model for {options.load_secs}s: not listening yet")
    _wait(options.load_secs, lambda: stop.is_set() or state.exiting, advance)
    if stop.is_set() or state.exiting:
        log("stopped while loading the model")
        return 0
    bootstrap: BootstrapServer | None = None
    transfer: TransferServer | None = None
    # Mooncake's transfer engine starts (and logs the transport it chose, see
    # _standin/transport.py, SGLANG_STANDIN_TRANSPORT) before the server answers.
    print_engine_lines(state.mode, args.disaggregation_transfer_backend, args.disaggregation_ib_device)
    # The warm-up starts as the ports start to listen (the HTTP server listens once it is built).
    state.start_warmup()
    try:
        # Bootstrap first: once the HTTP port accepts connections, the whole server is up.
        if state.mode == "prefill":
            bootstrap, transfer = _start_prefill_kv(
                state, options.kv_fault, options.slow_transfer_secs, options.kv_fault_max_pages)
        httpd = StandinHTTPServer(state)
    except OSError as exc:
        log(f"error: cannot listen on {args.host} (port {args.port}, bootstrap port {args.disaggregation_bootstrap_port}): {exc}")
        return 1
    server_thread = threading.Thread(target=httpd.serve_forever, name="http", daemon=True)
    server_thread.start()
    log(
        f"SGLang stand-in {__version__} (tests only) started: mode={state.mode} host={args.host} port={args.port}"
        + (f" bootstrap_port={args.disaggregation_bootstrap_port}" if bootstrap else "")
        + f" model={args.model_path} served_model_name={args.served_model_name} load={options.load_secs}s warmup={options.warmup_secs}s"
        + f" kv_waiting_timeout={options.waiting_timeout_secs}s"
    )
    while not stop.wait(0.1):
        if advance.is_set():
            advance.clear()
            state.end_warmup()
        if state.exiting and _drained(httpd, options.exit_poll_secs, stop):
            break
    httpd.shutdown()  # stop accepting
    if bootstrap is not None:
        bootstrap.shutdown()
        bootstrap.server_close()
    if transfer is not None:
        stop_transfer(transfer)
    httpd.drain()  # close idle keep-alive connections
    httpd.server_close()  # waits for in-flight requests
    log(f"stopped after serving {state.requests_served} generation requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
