"""A Docker daemon for the integration tests that read one (docker_host_info) on a machine without Docker.

`serve(socket_path, info, images, containers)` answers the Engine API on a unix socket, in a thread, until
`shutdown()`: `/version` (the API version the client settles on), `/info` (INFO, a dict), `/images/json`
(IMAGES, a list of the engine's image summaries, whatever the filter) and, when CONTAINERS is given,
`/containers/json` (that list, whatever the filters); anything else is a 404.
"""

from __future__ import annotations

import http.server
import json
import socketserver
import threading

VERSION = {'Version': '27.5.1', 'ApiVersion': '1.47', 'MinAPIVersion': '1.24', 'Os': 'linux', 'Arch': 'amd64'}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(socket_path, info, images=(), containers=None):
    """The running server (call `shutdown()` on it); SOCKET_PATH a pathlib path."""
    answers = (('/version', VERSION), ('/info', info), ('/images/json', list(images)), ('/containers/json', containers))

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.1'

        def do_GET(self):  # noqa: N802 (http.server's name)
            path = self.path.split('?')[0].rstrip('/')
            answer = next((answer for suffix, answer in answers if path.endswith(suffix)), None)
            body = json.dumps(answer if answer is not None else {'message': 'not here'}).encode()
            self.send_response(200 if answer is not None else 404)
            self.send_header('Content-Type', 'application/json')
            self.send_header('Content-Length', str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def address_string(self):
            return 'test'

        def log_message(self, *args):
            pass

    server = _Server(str(socket_path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
