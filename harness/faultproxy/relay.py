"""The fault proxy's HTTP handler: forward to the upstream, or apply the fault that fires."""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import struct
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from harness.faultproxy.control import ControlRoutes
from harness.faultproxy.faults import CONTROL_PREFIX, ERROR_FAULTS, Fault
from harness.faultproxy.upstream import (
    HOP_BY_HOP,
    Answer,
    LostAfterSending,
    NotSent,
    connection_tokens,
)

if TYPE_CHECKING:
    from harness.faultproxy.server import FaultProxyServer

logger = logging.getLogger("harness.faultproxy")
MAX_BODY_BYTES = 10 * 1024 * 1024
# A keep-alive connection nobody uses is closed after this long.
IDLE_TIMEOUT_SECONDS = 300.0
# A hold or a late request that no caller hang-up, delay or release ends still ends, so a
# forgotten fault cannot pin threads forever.
HOLD_LIMIT_SECONDS = 120.0
POLL_SECONDS = 0.02


class ProxyHandler(ControlRoutes, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "handover-faultproxy"
    timeout = IDLE_TIMEOUT_SECONDS
    server: FaultProxyServer

    def do_request(self) -> None:
        try:
            parts = urlsplit(self.path)
            path = parts.path or "/"
            if path.startswith(CONTROL_PREFIX) or path == CONTROL_PREFIX.rstrip("/"):
                self.control(path)
            else:
                self.proxy(path, parts.query)
        except (BrokenPipeError, ConnectionResetError, TimeoutError) as exc:
            # The caller went away while we were writing: nothing more to tell it.
            logger.info("%s %s: client gone (%s)", self.command, self.path, exc)
            self.close_connection = True

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_request
    # WebDAV (RFC 4918) and CalDAV (RFC 4791): a calendar's reads are PROPFIND and REPORT.
    do_PROPFIND = do_PROPPATCH = do_MKCOL = do_COPY = do_MOVE = do_request
    do_LOCK = do_UNLOCK = do_REPORT = do_MKCALENDAR = do_request

    # -- forwarding ----------------------------------------------------------------------------

    def proxy(self, path: str, query: str) -> None:
        body = self.read_body()
        if body is None:
            return
        state = self.server.state
        fault, keys = state.begin(self.command, path)
        try:
            self.apply(fault, keys, path + (f"?{query}" if query else ""), body)
        finally:
            state.finished()

    def apply(self, fault: Fault | None, keys: list[str], target: str, body: bytes) -> None:
        if fault is None:
            self.relay(self.forward(target, body, keys))
            return
        logger.info("fault %s on %r fires: %s %s", fault.mode, fault.target, self.command, target)
        mode = fault.mode
        if mode in ERROR_FAULTS:
            status, code = ERROR_FAULTS[mode]
            extra = []
            # A 503 is an outage unless told otherwise; with Retry-After Handover takes it as
            # a throttle (ledger.limits), which a drill's "destination unavailable" is not.
            retry_after = fault.retry_after or ("1" if mode == "error_429" else None)
            if retry_after is not None:
                extra.append(("Retry-After", retry_after))
            self.answer_json(status, {"error": code, "detail": f"fault proxy: {mode}"}, extra)
        elif mode == "reset_before_commit":
            self.drop(reset=True)
        elif mode == "latency":
            time.sleep(fault.delay_seconds())
            self.relay(self.forward(target, body, keys))
        elif mode == "timeout_after_commit":
            answer = self.forward(target, body, keys)
            time.sleep(fault.delay_seconds())
            self.relay(answer)
        elif mode == "drop_after_forward":
            if self.forward(target, body, keys) is not None:
                self.drop()
        elif mode == "hold":
            answer = self.forward(target, body, keys)
            if answer is not None:
                limit = fault.delay_ms / 1000 if fault.delay_ms is not None else None
                self.hold(until_hang_up=True, seconds=limit)
                self.drop()
        elif mode == "late":
            self.hold_late(fault)
            answer = self.forward(target, body, keys)
            if self.client_gone():
                self.close_connection = True
            else:
                self.relay(answer)

    def forward(self, target: str, body: bytes, keys: list[str]) -> Answer | None:
        """The upstream's answer; None when the client has already been told (502) or dropped."""
        listed = connection_tokens(self.headers.get_all("Connection", []))
        headers = [
            (name, value)
            for name, value in self.headers.items()
            if name.lower() not in HOP_BY_HOP | listed | {"host", "content-length"}
        ]
        if body or "Content-Length" in self.headers or "Transfer-Encoding" in self.headers:
            headers.append(("Content-Length", str(len(body))))
        state = self.server.state
        try:
            answer = self.server.upstream.send(
                self.command, target, headers, body, self.server.upstream_timeout
            )
        except NotSent as exc:
            state.count(keys, "upstream_unreachable")
            logger.warning("%s %s: upstream unreachable: %s", self.command, target, exc)
            self.answer_json(502, {"error": "upstream_unreachable", "detail": str(exc)})
            return None
        except LostAfterSending as exc:
            # The upstream may have acted: the caller must see what it would have seen, no
            # answer, not a status that says the request was refused.
            state.count(keys, "upstream_lost")
            logger.warning("%s %s: upstream gave no answer: %s", self.command, target, exc)
            self.drop()
            return None
        state.count(keys, "forwarded")
        logger.info("%s %s -> %s (forwarded)", self.command, target, answer.status)
        return answer

    def relay(self, answer: Answer | None) -> None:
        if answer is None:
            return
        listed = connection_tokens([v for k, v in answer.headers if k.lower() == "connection"])
        self.send_response_only(answer.status, answer.reason)
        no_body = self.command == "HEAD" or answer.status in (204, 304) or answer.status < 200
        for name, value in answer.headers:
            lowered = name.lower()
            if lowered in HOP_BY_HOP or lowered in listed:
                continue
            # A HEAD answer's Content-Length describes the GET body: pass it on unchanged.
            if lowered == "content-length" and self.command != "HEAD":
                continue
            self.send_header(name, value)
        if not no_body:
            self.send_header("Content-Length", str(len(answer.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not no_body:
            self.wfile.write(answer.body)

    def read_body(self) -> bytes | None:
        """The request body; None when the request was refused (and answered) instead."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        if not raw.strip().isdigit():
            self.close_connection = True
            self.answer_json(400, {"error": "bad_request", "detail": "invalid Content-Length"})
            return None
        length = int(raw)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            detail = f"body exceeds {MAX_BODY_BYTES} bytes"
            self.answer_json(413, {"error": "payload_too_large", "detail": detail})
            return None
        return self.rfile.read(length)

    def read_chunked(self) -> bytes | None:
        chunks, size = [], 0
        while True:
            line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            try:
                length = int(line, 16)
            except ValueError:
                self.close_connection = True
                self.answer_json(400, {"error": "bad_request", "detail": "invalid chunked body"})
                return None
            size += length
            if size > MAX_BODY_BYTES:
                self.close_connection = True
                detail = f"body exceeds {MAX_BODY_BYTES} bytes"
                self.answer_json(413, {"error": "payload_too_large", "detail": detail})
                return None
            if length == 0:
                while self.rfile.readline(1024).strip():
                    pass  # trailers: dropped, like every hop-by-hop field
                return b"".join(chunks)
            chunks.append(self.rfile.read(length))
            self.rfile.readline(1024)

    # -- faults that withhold --------------------------------------------------------------------

    def drop(self, *, reset: bool = False) -> None:
        """Close the client's connection without a word: a FIN, or with ``reset`` a RST."""
        self.close_connection = True
        if reset:
            # SO_LINGER 0 makes close() send a RST and discard anything unsent. close() here,
            # before the server's shutdown(SHUT_WR), so no FIN goes out first; the descriptor
            # really closes once the handler's file objects are closed.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

    def client_gone(self) -> bool:
        """Has the caller hung up? (Readable with nothing to read is its FIN or RST.)"""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def hold(self, *, until_hang_up: bool, seconds: float | None) -> str:
        """Wait until ``POST /_proxy/release``, the caller hangs up (if ``until_hang_up``) or
        ``seconds`` (at most HOLD_LIMIT_SECONDS) pass; say which ended the wait."""
        state = self.server.state
        generation = state.hold_started()
        deadline = time.monotonic() + min(
            seconds if seconds is not None else HOLD_LIMIT_SECONDS, HOLD_LIMIT_SECONDS
        )
        try:
            while True:
                if state.released_since(generation):
                    return "released"
                if until_hang_up and self.client_gone():
                    return "hung_up"
                if time.monotonic() >= deadline:
                    return "timed_out"
                time.sleep(POLL_SECONDS)
        finally:
            state.hold_ended()

    def hold_late(self, fault: Fault) -> None:
        """``late``: without delay_ms, until released; with it, until delay_ms after the caller
        hung up, so the request reaches the upstream only once the caller has given up."""
        if fault.delay_ms is None:
            self.hold(until_hang_up=False, seconds=None)
            return
        if self.hold(until_hang_up=True, seconds=None) == "released":
            return
        self.hold(until_hang_up=False, seconds=fault.delay_ms / 1000)

    # -- shared --------------------------------------------------------------------------------

    def answer_json(
        self, status: int, payload: Any, extra_headers: Sequence[tuple[str, str]] = ()
    ) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response_only(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        # Lets FaultProxy tell its own child from another process on the same port.
        self.send_header("X-Fault-Proxy-Pid", str(os.getpid()))
        for name, value in extra_headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        logger.info("%s %s -> %s (proxy)", self.command, self.path, status)

    def log_message(self, format: str, *args: Any) -> None:
        logger.info("%s %s", self.address_string(), format % args)
