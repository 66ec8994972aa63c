"""A real HTTP server in the test's process that answers every request with one fixed answer
(status, headers, raw body bytes) and counts what it was sent: the odd destination the sandbox
will not be (a NUL in its body, ``Retry-After: 0``)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OddServer:
    def __init__(self, status=200, body=b"", headers=None):
        self.status, self.body, self.headers = status, body, dict(headers or {})
        self.requests: list[tuple[str, str]] = []
        odd = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                odd.requests.append((self.command, self.path))
                self.send_response(odd.status)
                for name, value in odd.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(odd.body)))
                self.end_headers()
                self.wfile.write(odd.body)

            do_GET = do_POST = do_PATCH = _answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
