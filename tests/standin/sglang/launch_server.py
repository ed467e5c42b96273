"""Entry point of the stand-in: ``python -m sglang.launch_server [SGLang flags]``.

Tests only: serves SGLang's HTTP API on CPU with deterministic replies. Like
SGLang it exits 1 at start, before listening, when --model-path is not a directory
holding config.json (the only file of it the stand-in reads). In prefill mode it
also listens on --disaggregation-bootstrap-port. SIGTERM or SIGINT stop it
gracefully: no new connections, in-flight requests finish, exit 0.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from sglang import __version__
from sglang._standin.args import model_path_error, parse_args
from sglang._standin.httpd import StandinHTTPServer
from sglang._standin.pd import BootstrapServer, start_bootstrap
from sglang._standin.state import ServerState, log
from sglang._standin.transport import chosen, print_engine_lines


def _install_stop_handlers(stop: threading.Event) -> None:
    """SIGTERM (systemd, docker stop) and SIGINT set stop."""

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        log(f"received {signal.Signals(signum).name}: stop accepting, finish in-flight requests, exit")
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in until SIGTERM/SIGINT; return the exit code."""
    args, ignored, options = parse_args(argv)
    # Like SGLang, which reads the model's config.json before anything listens: the
    # last line of its traceback, on stderr, and exit 1.
    model_error = model_path_error(args.model_path)
    if model_error is not None:
        sys.stderr.write(model_error + "\n")
        sys.stderr.flush()
        return 1
    try:
        chosen(os.environ, args.disaggregation_ib_device)
    except ValueError as exc:
        log(f"error: {exc}")
        return 2
    state = ServerState(args, ignored, options.warmup_secs, options.token_delay_secs, options.waiting_timeout_secs)
    stop = threading.Event()
    _install_stop_handlers(stop)
    bootstrap: BootstrapServer | None = None
    # Mooncake's transfer engine starts (and logs the transport it chose, see
    # _standin/transport.py, SGLANG_STANDIN_TRANSPORT) before the server answers.
    print_engine_lines(state.mode, args.disaggregation_transfer_backend, args.disaggregation_ib_device)
    try:
        # Bootstrap first: once the HTTP port accepts connections, the whole server is up.
        if state.mode == "prefill":
            bootstrap = start_bootstrap(args.host, args.disaggregation_bootstrap_port, args.port, state.count_bootstrap_connection)
        httpd = StandinHTTPServer(state)
    except OSError as exc:
        log(f"error: cannot listen on {args.host} (port {args.port}, bootstrap port {args.disaggregation_bootstrap_port}): {exc}")
        return 1
    server_thread = threading.Thread(target=httpd.serve_forever, name="http", daemon=True)
    server_thread.start()
    log(
        f"SGLang stand-in {__version__} (tests only) started: mode={state.mode} host={args.host} port={args.port}"
        + (f" bootstrap_port={args.disaggregation_bootstrap_port}" if bootstrap else "")
        + f" model={args.model_path} served_model_name={args.served_model_name} warmup={options.warmup_secs}s"
        + f" kv_waiting_timeout={options.waiting_timeout_secs}s"
        + (f" ignored_args={' '.join(ignored)}" if ignored else "")
    )
    while not stop.wait(0.5):
        pass
    httpd.shutdown()  # stop accepting
    if bootstrap is not None:
        bootstrap.shutdown()
        bootstrap.server_close()
    httpd.drain()  # close idle keep-alive connections
    httpd.server_close()  # waits for in-flight requests
    log(f"stopped after serving {state.requests_served} generation requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
