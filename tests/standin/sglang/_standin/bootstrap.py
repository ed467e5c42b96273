"""The prefill's bootstrap server, as SGLang 0.5.14 serves it, and the prefill's registration with it.

SGLang runs ``CommonKVBootstrapServer`` (sglang/srt/disaggregation/common/conn.py, an
aiohttp app) on the prefill's ``--disaggregation-bootstrap-port``. The stand-in serves the
same routes, methods, query parameters, payload keys, texts and status codes with the
standard library:

- ``PUT /route`` (``_handle_route_put``): a prefill rank registers (JSON: ``attn_tp_size``,
  ``attn_tp_rank``, ``attn_cp_size``, ``attn_cp_rank``, ``attn_dp_size``, ``attn_dp_rank``,
  ``pp_size``, ``pp_rank``, ``system_dp_size``, ``system_dp_rank``, ``rank_ip``, ``rank_port``,
  ``page_size``, ``kv_cache_dtype``, optional ``load_balance_method``); 200 ``OK``.
- ``GET /route?prefill_dp_rank=&prefill_cp_rank=&target_tp_rank=&target_pp_rank=``
  (``_handle_route_get``): a parameter missing or empty: 400 ``Missing inputs for bootstrap
  server.``; all four ``-1``: the prefill's parallel info (``PrefillServerInfo``); otherwise
  that rank's ``{"rank_ip", "rank_port"}`` (``PrefillRankInfo``), 404 ``Bootstrap info not
  found for ...`` when no such rank registered. Either is 503 ``Prefill server not fully
  registered yet (N workers registered).`` until every rank has registered.
- ``/route`` with another method: 405 ``Method not allowed``.
- ``POST /register_dp_rank`` and ``POST /query_dp_ranks``: the room to DP rank table.
- ``GET /health``: 200 ``OK``.

A route the app does not have answers aiohttp's 404 ``404: Not Found``; a known route with
another method aiohttp's 405 ``405: Method Not Allowed``; a handler that raises (a payload key
missing, a rank that is not a number) aiohttp's 500. ``register_to_bootstrap``
(``CommonKVManager``) is what the prefill sends at start: one PUT per rank.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sglang._standin.pd import host_port

ROUTE = "/route"
# SGLang's requests timeout for every bootstrap call (common/conn.py).
REQUEST_TIMEOUT_SECS = 5.0
# register_to_bootstrap: max_retries, initial_delay, max_delay.
REGISTER_RETRIES, REGISTER_DELAY_SECS, REGISTER_MAX_DELAY_SECS = 5, 1.0, 30.0
_AIOHTTP_500 = "500 Internal Server Error\n\nServer got itself in trouble"
# Bootstrap calls go straight to the peer: a proxy set for other traffic is not used.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclasses.dataclass
class PrefillServerInfo:
    """The GET /route answer for ranks -1 (SGLang's dataclass, topology fields only)."""

    attn_tp_size: int
    attn_cp_size: int
    dp_size: int
    pp_size: int
    page_size: int | None
    kv_cache_dtype: str | None
    follow_bootstrap_room: bool


@dataclasses.dataclass
class PrefillRankInfo:
    """The GET /route answer for one rank: where decode reaches that rank's KV sender."""

    rank_ip: str
    rank_port: int


@dataclasses.dataclass
class RankTable:
    """What the prefill ranks registered (CommonKVBootstrapServer's fields); thread-safe."""

    attn_tp_size: int | None = None
    attn_cp_size: int | None = None
    dp_size: int | None = None
    pp_size: int | None = None
    page_size: int | None = None
    kv_cache_dtype: str | None = None
    follow_bootstrap_room: bool | None = None
    ranks: dict[tuple[int, int, int, int], PrefillRankInfo] = dataclasses.field(default_factory=dict)
    registered: int = 0
    room_to_dp_rank: dict[int, int] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def register(self, data: dict[str, Any]) -> None:
        """_handle_route_put: the first registration sets the topology; raises KeyError/ValueError on a bad payload."""
        values = {key: data[key] for key in ("attn_tp_size", "attn_tp_rank", "attn_cp_size", "attn_cp_rank",
                                             "attn_dp_size", "attn_dp_rank", "pp_size", "pp_rank", "system_dp_size",
                                             "system_dp_rank", "rank_ip", "kv_cache_dtype")}
        rank_port, page_size = int(data["rank_port"]), int(data["page_size"])
        system_dp = values["system_dp_size"]
        with self.lock:
            self.attn_tp_size = values["attn_tp_size"] if self.attn_tp_size is None else self.attn_tp_size
            self.attn_cp_size = values["attn_cp_size"] if self.attn_cp_size is None else self.attn_cp_size
            if self.dp_size is None:
                self.dp_size = values["attn_dp_size"] if system_dp == 1 else system_dp
            self.pp_size = values["pp_size"] if self.pp_size is None else self.pp_size
            self.page_size = page_size if self.page_size is None else self.page_size
            self.kv_cache_dtype = values["kv_cache_dtype"] if self.kv_cache_dtype is None else self.kv_cache_dtype
            if self.follow_bootstrap_room is None:
                method = data.get("load_balance_method", "follow_bootstrap_room")
                self.follow_bootstrap_room = method == "follow_bootstrap_room"
            dp_group = values["attn_dp_rank"] if system_dp == 1 else values["system_dp_rank"]
            key = (dp_group, values["attn_cp_rank"], values["attn_tp_rank"], values["pp_rank"])
            self.ranks[key] = PrefillRankInfo(str(values["rank_ip"]), rank_port)
            self.registered += 1

    def ready(self) -> bool:
        """_is_ready: every rank of the registered topology has registered."""
        sizes = (self.dp_size, self.attn_cp_size, self.attn_tp_size, self.pp_size)
        if any(size is None for size in sizes):
            return False
        expected = 1
        for size in sizes:
            expected *= int(size or 0)
        return self.registered >= expected

    def server_info(self) -> PrefillServerInfo:
        """The parallel info decode asks for first."""
        return PrefillServerInfo(
            attn_tp_size=int(self.attn_tp_size or 0), attn_cp_size=int(self.attn_cp_size or 0),
            dp_size=int(self.dp_size or 0), pp_size=int(self.pp_size or 0), page_size=self.page_size,
            kv_cache_dtype=self.kv_cache_dtype,
            follow_bootstrap_room=True if self.follow_bootstrap_room is None else self.follow_bootstrap_room)


class BootstrapHandler(BaseHTTPRequestHandler):
    """The routes of CommonKVBootstrapServer._setup_routes."""

    server: BootstrapServer
    protocol_version = "HTTP/1.1"
    server_version = "Python/aiohttp"

    def log_message(self, format: str, *args: Any) -> None:  # pylint: disable=redefined-builtin
        """SGLang logs the bootstrap server's access only at DEBUG level: nothing here."""

    def _reply(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, data: Any) -> None:
        self._reply(200, json.dumps(data), "application/json; charset=utf-8")

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"null")

    def _dispatch(self) -> None:
        self.server.on_request()
        path = urlsplit(self.path).path
        routes: dict[str, dict[str, Callable[[], None]]] = {
            ROUTE: {"PUT": self._route_put, "GET": self._route_get},
            "/register_dp_rank": {"POST": self._register_dp_rank},
            "/query_dp_ranks": {"POST": self._query_dp_ranks},
            "/health": {"GET": lambda: self._reply(200, "OK"), "HEAD": lambda: self._reply(200, "OK")},
        }
        methods = routes.get(path)
        if methods is None:
            self._reply(404, "404: Not Found")
        elif self.command in methods:
            try:
                methods[self.command]()
            except (KeyError, TypeError, ValueError):
                self._reply(500, _AIOHTTP_500)
        elif path == ROUTE:
            self._reply(405, "Method not allowed", "application/json")  # _handle_route's own answer
        else:
            self._reply(405, "405: Method Not Allowed")

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _dispatch  # noqa: N815

    def _route_put(self) -> None:
        self.server.table.register(self._body())
        self._reply(200, "OK")

    def _route_get(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        names = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        given = [(query.get(name) or [""])[0] for name in names]
        if not all(given):
            self._reply(400, "Missing inputs for bootstrap server.")
            return
        ranks = tuple(int(value) for value in given)
        table = self.server.table
        if not table.ready():
            self._reply(503, f"Prefill server not fully registered yet ({table.registered} workers registered).")
        elif ranks == (-1, -1, -1, -1):
            self._json(dataclasses.asdict(table.server_info()))
        elif ranks in table.ranks:
            self._json(dataclasses.asdict(table.ranks[ranks]))  # type: ignore[index]
        else:
            dp, cp, tp, pp = given
            self._reply(404, f"Bootstrap info not found for dp_rank={dp} cp_rank={cp} tp_rank={tp} pp_rank={pp}")

    def _register_dp_rank(self) -> None:
        data = self._body()
        room, dp_rank = int(data["bootstrap_room"]), int(data["dp_rank"])
        with self.server.table.lock:
            self.server.table.room_to_dp_rank[room] = dp_rank
        self._reply(200, "OK")

    def _query_dp_ranks(self) -> None:
        rooms = [int(room) for room in self._body()["bootstrap_rooms"]]
        with self.server.table.lock:
            known = self.server.table.room_to_dp_rank
            self._json({str(room): known[room] for room in rooms if room in known})


class BootstrapServer(ThreadingHTTPServer):
    """The HTTP server on the prefill's bootstrap port."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, on_request: Callable[[], None]) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.table = RankTable()
        self.on_request = on_request
        super().__init__((host.strip("[]"), port), BootstrapHandler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup."""
        TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


def start_bootstrap(host: str, port: int, on_request: Callable[[], None] = lambda: None) -> BootstrapServer:
    """Bind the bootstrap server (raises OSError) and serve it in a background thread."""
    server = BootstrapServer(host, port, on_request)
    threading.Thread(target=server.serve_forever, name="bootstrap", daemon=True).start()
    return server


def registration(args: Any, rank_ip: str, rank_port: int, tp_rank: int, pp_rank: int) -> dict[str, Any]:
    """register_to_bootstrap's payload for one rank of this prefill (one DP group, one CP rank)."""
    return {
        "attn_tp_size": int(args.tp_size), "attn_tp_rank": tp_rank, "attn_cp_size": 1, "attn_cp_rank": 0,
        "attn_dp_size": 1, "attn_dp_rank": 0, "pp_size": int(args.pp_size), "pp_rank": pp_rank,
        "system_dp_size": 1, "system_dp_rank": 0, "rank_ip": rank_ip, "rank_port": rank_port,
        "page_size": int(args.page_size or 1), "kv_cache_dtype": args.kv_cache_dtype,
        "load_balance_method": args.load_balance_method,
    }


def call(method: str, url: str, payload: Any = None, timeout: float = REQUEST_TIMEOUT_SECS) -> tuple[int, str]:
    """One bootstrap call (SGLang uses requests): (status, text); raises OSError when there is no answer."""
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url, data, method=method, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            return int(response.status), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise reason if isinstance(reason, OSError) else OSError(str(reason)) from exc


def register_ranks(bootstrap_host: str, bootstrap_port: int, payloads: list[dict[str, Any]],
                   log: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> bool:
    """register_to_bootstrap for each rank: PUT /route, up to 5 tries with SGLang's backoff; True when all took."""
    url = f"http://{host_port(bootstrap_host, bootstrap_port)}{ROUTE}"
    for payload in payloads:
        for attempt in range(REGISTER_RETRIES):
            try:
                status, _text = call("PUT", url, payload)
            except OSError as exc:
                problem = str(exc)
            else:
                if status == 200:
                    break
                problem = f"status {status}"
            log(f"Prefill register attempt {attempt + 1}/{REGISTER_RETRIES} failed: {problem}")
            if attempt < REGISTER_RETRIES - 1:
                sleep(min(REGISTER_DELAY_SECS * 2 ** attempt, REGISTER_MAX_DELAY_SECS))
        else:
            log(f"Prefill instance failed to register to bootstrap server after {REGISTER_RETRIES} retries")
            return False
    return True
