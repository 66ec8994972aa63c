"""Reading a destination's answer within bounds, before anything holds it (ledger.http).

An answer is streamed off the socket in chunks and decompressed here, by Handover, never by
requests: what is held is bounded before it is held.

- **Size**: at most ``max_bytes`` after decompression (READ_MAX_BYTES for the JSON and XML
  answers of a CRM, a look-up or a calendar; DOCUMENT_MAX_BYTES for a document). A
  ``Content-Length`` already over it is refused before one byte of the body is read.
- **Ratio**: decoded bytes / bytes off the wire at most READ_MAX_RATIO once more than
  ``RATIO_FLOOR`` has been decoded (a small answer of repeated characters is no bomb).
- **Time**: the whole call (connection, status line, headers, body) within one budget,
  READ_BUDGET_SECONDS but never less than the call's own timeout, and never past an enclosing
  ``deadline()`` (a *Check connection* runs all its calls in one). Not per byte: a server that
  drips one byte a second is cut when the budget ends. A watchdog shuts the socket down at the
  deadline, so no blocking read outlives it, whatever the phase.
- **Nesting**: a JSON answer nested deeper than ``MAX_DEPTH`` is not read (``parse_json``).

Past a bound, ``Unread`` says which, in plain words; ledger.http turns it into the
ConnectorError the status line calls for, and closes the connection.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import zlib

from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import HTTPError

KB = 1024
MB = 1024 * KB
CHUNK = 64 * KB
RATIO_FLOOR = 1 * MB
MAX_DEPTH = 64
# Sent on every call unless the caller names its own: the encodings decoded here, no others.
ACCEPT_ENCODING = "gzip, deflate"

_local = threading.local()


class Unread(Exception):
    """The answer was not read in full: a bound was reached. ``str()`` says which, in words."""


def size(count: int) -> str:
    """``2097152`` as "2 MB", ``1536`` as "1.5 KB", ``12`` as "12 bytes"."""
    for unit, name in ((MB, "MB"), (KB, "KB")):
        if count >= unit:
            return f"{count / unit:.1f}".removesuffix(".0") + f" {name}"
    return f"{count} byte" + ("" if count == 1 else "s")


class Bounds:
    """The bounds of one call's answer."""

    def __init__(self, *, timeout: float, max_bytes: int | None = None):
        self.max_bytes = int(max_bytes or settings.READ_MAX_BYTES)
        self.max_ratio = float(settings.READ_MAX_RATIO)
        budget = max(float(settings.READ_BUDGET_SECONDS), float(timeout))
        enclosing = getattr(_local, "deadline", None)
        if enclosing is not None:
            budget = min(budget, enclosing - time.monotonic())
        self.seconds = budget


def document_max_bytes() -> int:
    return int(settings.DOCUMENT_MAX_BYTES)


@contextlib.contextmanager
def deadline(seconds: float):
    """Every call made inside ends within ``seconds`` from now, all of them together."""
    outer = getattr(_local, "deadline", None)
    mine = time.monotonic() + seconds
    _local.deadline = mine if outer is None else min(outer, mine)
    try:
        yield
    finally:
        _local.deadline = outer


class Watch:
    """The budget's watchdog: at the deadline it shuts down the socket of the call in flight
    (the connection classes below hand it over as the status line is awaited), so a blocked
    read returns at once. ``expired`` then tells why the read ended."""

    def __init__(self, seconds: float):
        self.seconds = max(seconds, 0.0)
        self.expired = False
        self._sock = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(self.seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self):
        _local.watch = self
        self._timer.start()
        return self

    def __exit__(self, *exc):
        self._timer.cancel()
        _local.watch = None
        with self._lock:
            self._sock = None

    def hold(self, sock):
        with self._lock:
            self._sock = sock
            if self.expired:
                _shut(sock)

    def _expire(self):
        with self._lock:
            self.expired = True
            if self._sock is not None:
                _shut(self._sock)

    def words(self, held: int) -> str:
        return (
            f"too slow to read: the answer took longer than {round(self.seconds, 1):g} s "
            f"(stopped after {size(held)})"
        )


def _shut(sock):
    try:
        # The plain socket's shutdown, under TLS too: it wakes a blocked read at once, and
        # never writes (a TLS close_notify would), so it cannot block itself.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, TypeError):
        pass


class _Watched:
    def getresponse(self, *args, **kwargs):
        watch = getattr(_local, "watch", None)
        if watch is not None and self.sock is not None:
            watch.hold(self.sock)
        return super().getresponse(*args, **kwargs)


class _HttpConnection(_Watched, HTTPConnection):
    pass


class _HttpsConnection(_Watched, HTTPSConnection):
    pass


class _HttpPool(HTTPConnectionPool):
    ConnectionCls = _HttpConnection


class _HttpsPool(HTTPSConnectionPool):
    ConnectionCls = _HttpsConnection


class Adapter(HTTPAdapter):
    """requests' adapter whose connections hand their socket to the call's Watch."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HttpPool, "https": _HttpsPool}


class _Decoder:
    """Content-Encoding undone with an output bound: never more than asked for per call."""

    def __init__(self, encoding: str):
        name = encoding.strip().lower()
        if name in ("", "identity"):
            self.kind = "identity"
        elif name in ("gzip", "x-gzip"):
            self.kind = "gzip"
        elif name == "deflate":
            self.kind = "deflate"
        else:
            raise Unread(
                f"the answer was compressed as {encoding[:40]!r}, which Handover did not ask for "
                "and does not read"
            )
        self._started = False  # the first bytes have been decoded
        self._trailing = False  # a gzip member ended; what follows may be padding
        self._done = False
        self._obj = self._new()

    def _new(self, raw: bool = False):
        if self.kind == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)

    def decode(self, data: bytes, room: int) -> bytes:
        """``data`` decoded, at most ``room + 1`` bytes (one more than ``room`` says: over)."""
        if self.kind == "identity":
            return data
        out = bytearray()
        pending = b"" if self._done else data
        while pending and len(out) <= room:
            try:
                out += self._obj.decompress(pending, room + 1 - len(out))
            except zlib.error as exc:
                if self.kind == "deflate" and not self._started:
                    # Some servers send raw deflate without zlib's header (as urllib3 allows).
                    self._started, self._obj = True, self._new(raw=True)
                    continue
                if self._trailing:
                    self._done = True  # bytes after the last gzip member: ignored, as urllib3
                    break
                raise Unread(f"the answer's {self.kind} compression is broken ({exc})") from exc
            self._started = True
            if self._obj.eof:
                pending = self._obj.unused_data
                if pending and self.kind == "gzip":
                    self._obj, self._trailing = self._new(), True  # another gzip member
                else:
                    self._done, pending = True, b""
            else:
                pending = self._obj.unconsumed_tail
        return bytes(out)


def read_body(response, bounds: Bounds, watch: Watch) -> bytes:
    """The answer's body, decoded, or Unread. ``response``: requests' streamed response."""
    encoding = response.headers.get("Content-Encoding", "") or ""
    decoder = _Decoder(encoding)
    declared = (response.headers.get("Content-Length", "") or "").strip()
    told = int(declared) if declared.isascii() and declared.isdigit() else 0
    if decoder.kind == "identity" and told > bounds.max_bytes:
        raise Unread(
            f"the answer was larger than {size(bounds.max_bytes)} (it said it was "
            f"{size(told)}; not read)"
        )
    body = bytearray()
    wire = 0
    while True:
        if watch.expired:
            raise Unread(watch.words(len(body)))
        try:
            raw = response.raw.read(CHUNK, decode_content=False)
        except (HTTPError, OSError):
            if watch.expired:  # the watchdog shut the socket: too slow, not lost
                raise Unread(watch.words(len(body))) from None
            raise
        if watch.expired:
            raise Unread(watch.words(len(body)))
        if not raw:
            break
        wire += len(raw)
        allowed = min(bounds.max_bytes, max(RATIO_FLOOR, int(bounds.max_ratio * wire)))
        piece = decoder.decode(raw, allowed - len(body))
        if len(body) + len(piece) > allowed:
            decoded = len(body) + len(piece)
            if allowed >= bounds.max_bytes and decoder.kind == "identity":
                raise Unread(
                    f"the answer was larger than {size(bounds.max_bytes)} (stopped reading at "
                    f"{size(decoded)})"
                )
            if allowed >= bounds.max_bytes:
                raise Unread(
                    f"the answer was larger than {size(bounds.max_bytes)} after decompression "
                    f"(stopped reading at {size(decoded)} from {size(wire)} off the wire)"
                )
            raise Unread(
                f"the answer grew more than {bounds.max_ratio:g}-fold when decompressed "
                f"(stopped reading at {size(decoded)} from {size(wire)} off the wire)"
            )
        body += piece
    return bytes(body)


def parse_json(text: str):
    """``text``'s JSON value; ValueError when it is not JSON, Unread when it nests deeper than
    ``MAX_DEPTH`` (Python's parser would raise RecursionError at about a thousand levels, and
    what reads the value after it recurses too)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise Unread(f"the answer's JSON nests deeper than {MAX_DEPTH} levels") from None
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | dict):
            if depth > MAX_DEPTH:
                raise Unread(f"the answer's JSON nests deeper than {MAX_DEPTH} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value
