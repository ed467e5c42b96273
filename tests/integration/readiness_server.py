"""A stand-in router for the balancer tests: answers /readiness and a chat path, run as its own process.

`python readiness_server.py NAME ADDRESS PORT` listens on ADDRESS (IPv4 or IPv6) and PORT and prints
`ready` once it does.
  GET  /readiness              200, or 503 after POST /control/unready
  POST /v1/chat/completions    200 with {"router": NAME}
  POST /slow                   200 with {"router": NAME} once POST /control/release is made
  POST /control/unready, /control/release   switches for the test (answer 204)
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME, ADDRESS, PORT = sys.argv[1], sys.argv[2], int(sys.argv[3])
READY = threading.Event()
READY.set()
RELEASE = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, *_args):
        pass

    def _answer(self, status, body=b''):
        self.send_response(status)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == '/readiness':
            self._answer(200 if READY.is_set() else 503, b'{}')
        else:
            self._answer(404)

    def do_POST(self):
        self.rfile.read(int(self.headers.get('Content-Length') or 0))
        if self.path == '/control/unready':
            READY.clear()
            self._answer(204)
        elif self.path == '/control/release':
            RELEASE.set()
            self._answer(204)
        elif self.path in ('/v1/chat/completions', '/slow'):
            if self.path == '/slow':
                RELEASE.wait(120)
            self._answer(200, json.dumps({'router': NAME}).encode())
        else:
            self._answer(404)


class Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6 if ':' in ADDRESS else socket.AF_INET


if __name__ == '__main__':
    server = Server((ADDRESS, PORT), Handler)
    print('ready', flush=True)
    server.serve_forever()
