"""A hostile destination: a real HTTP server in the test's process that answers every request
with one answer of the replayable corpus (tests/ledger/fixtures/hostile_answers.json): a gzip
bomb, a body without end, a body or headers dripped a byte a second, JSON nested a hundred
thousand deep, an answer that echoes the request's Authorization header.

Written on raw sockets, not http.server, so that it can drip the status line's headers and
stream a gigabyte it never holds. It stops writing when the client goes away.
"""

from __future__ import annotations

import functools
import json
import socketserver
import struct
import threading
import time
import zlib
from pathlib import Path

CORPUS = Path(__file__).parent / "fixtures" / "hostile_answers.json"
PIECE = 64 * 1024


def corpus() -> list[dict]:
    return json.loads(CORPUS.read_text())


def answer(name: str) -> dict:
    return next(a for a in corpus() if a["name"] == name)


@functools.lru_cache(maxsize=4)
def gzip_of_zeros(count: int) -> bytes:
    """A gzip stream that decodes to ``count`` zero bytes (1 GB is about 1 MB of gzip), made in
    a moment: one mebibyte compressed once, its deflate blocks repeated (a full flush makes
    them stand alone), a final empty block, and the trailer's CRC and size."""
    mebibyte = bytes(1024 * 1024)
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    blocks = packer.compress(mebibyte) + packer.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(count, len(mebibyte))
    crc = 0
    for _ in range(whole):
        crc = zlib.crc32(mebibyte, crc)
    tail = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    last = tail.compress(bytes(rest)) + tail.flush()
    crc = zlib.crc32(bytes(rest), crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc, count & 0xFFFFFFFF)
    return header + blocks * whole + last + trailer


def _pieces(body: dict, request_headers: dict[str, str]):
    """The body's bytes, piece by piece, and its length when it has one (else None)."""
    if "text" in body:
        data = body["text"].encode()
        return [data], len(data)
    if "repeat" in body:
        data = (body["repeat"] * body["count"]).encode()
        return [data], len(data)
    if "raw" in body:
        return [body["raw"]], len(body["raw"])
    if "nest" in body:
        data = ("[" * body["nest"] + "]" * body["nest"]).encode()
        return [data], len(data)
    if "gzip_zeros" in body:
        data = gzip_of_zeros(body["gzip_zeros"])
        return [data[i : i + PIECE] for i in range(0, len(data), PIECE)], len(data)
    if "zeros" in body:
        count = body["zeros"]
        return (bytes(min(PIECE, count - i)) for i in range(0, count, PIECE)), None
    if "drip" in body:
        return (body["drip"].encode() for _ in range(body["count"])), None
    if "echo" in body:
        said = request_headers.get(body["echo"].lower(), "")
        data = body["template"].replace("{echo}", said).encode()
        return [data], len(data)
    raise ValueError(f"no such body: {body}")


class HostileServer:
    """``with HostileServer(answer("gzip_bomb")) as server: ... server.url``."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.requests: list[tuple[str, dict]] = []
        self.written = 0  # body bytes handed to the socket, over all requests
        hostile = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                try:
                    hostile._answer(self)
                except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError):
                    pass  # the client went away: what a limit does

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _answer(self, handler):
        line = handler.rfile.readline(65537).decode("latin-1").strip()
        headers = {}
        while True:
            raw = handler.rfile.readline(65537)
            if raw in (b"\r\n", b"\n", b""):
                break
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        if length:
            handler.rfile.read(length)
        self.requests.append((line, headers))
        spec = self.spec
        pieces, size = _pieces(spec["body"], headers)
        head = [f"HTTP/1.1 {spec.get('status', 200)} Hostile"]
        head += [f"{name}: {value}" for name, value in spec.get("headers", {}).items()]
        if size is not None and spec.get("length", True):
            head.append(f"Content-Length: {size}")
        head.append("Connection: close")
        every = float(spec.get("every", 1.0))
        if spec.get("drip_headers"):
            handler.wfile.write((head[0] + "\r\n").encode())
            while True:  # one header byte a second, for ever
                handler.wfile.write(b"X")
                handler.wfile.flush()
                time.sleep(every)
        handler.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode())
        for piece in pieces:
            handler.wfile.write(piece)
            handler.wfile.flush()
            self.written += len(piece)
            if "drip" in spec["body"]:
                time.sleep(every)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
