"""A fault-injecting HTTP reverse proxy: the sandbox's faults in front of any destination.

A real CRM cannot be told to time out after it committed, so the tests, the drill and the soak
reach it through this proxy and arm the faults here instead:

    python -m harness.faultproxy --upstream http://127.0.0.1:8000 --port 0 \\
        --target crm.create="POST /api/cases/" --target crm.lookup="GET /api/cases/"

Every request outside ``/_proxy/`` is forwarded to the one upstream (method, path, query,
headers including Authorization, body; Host rewritten, hop-by-hop headers dropped) and its
answer passed back, unless a fault armed for its target fires. ``/_proxy/`` is the control API
(faults, stats, release, reset), shaped like the sandbox's ``/_sandbox/``. See docs/sandbox.md,
"The fault proxy", for the modes and what each proves.

The proxy never turns "unknown" into "refused": an upstream it cannot connect to gets the client
a 502 (nothing was sent), but an upstream that took the request and then failed to answer gets
the client a dropped connection, as a caller talking to the upstream directly would see.

The server is standard library only and binds only to loopback. ``FaultProxy`` at the bottom
runs it as a child process for tests and the drill.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import ipaddress
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("harness.faultproxy")

CONTROL_PREFIX = "/_proxy/"
MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_UPSTREAM_TIMEOUT_SECONDS = 60.0
# A keep-alive connection nobody uses is closed after this long.
IDLE_TIMEOUT_SECONDS = 300.0
# A hold or a late request that no caller hang-up, delay or release ends still ends, so a
# forgotten fault cannot pin threads forever.
HOLD_LIMIT_SECONDS = 120.0
POLL_SECONDS = 0.02

# RFC 9110 section 7.6.1, plus the non-standard ones clients still send.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)

ERROR_FAULTS = {
    "error_401": (401, "unauthorized"),
    "error_403": (403, "forbidden"),
    "error_422": (422, "unprocessable_entity"),
    "error_429": (429, "too_many_requests"),
    "error_503": (503, "service_unavailable"),
}
FORWARDING_MODES = (
    "reset_before_commit",
    "drop_after_forward",
    "timeout_after_commit",
    "hold",
    "late",
    "latency",
)
MODES = (*ERROR_FAULTS, *FORWARDING_MODES)
DELAY_MODES = ("timeout_after_commit", "hold", "late", "latency")
RETRY_AFTER_MODES = ("error_429", "error_503")
DEFAULT_DELAY_MS = {"timeout_after_commit": 5000, "latency": 1000}
FAULT_FIELDS = {"target", "mode", "count", "delay_ms", "retry_after"}


def loopback_host(host: str) -> str:
    """The address to bind for ``host``; ValueError unless it is a loopback address.

    The proxy forwards anything it is sent, credentials included, to a real system: reachable
    from another machine it would be an open relay into that system.
    """
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise ValueError(
            f"refusing to bind the fault proxy to {host!r}: it binds only to a loopback "
            "address (127.0.0.1, ::1 or localhost)"
        )
    return host


# -- targets and faults ------------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """``"METHOD /path"``: that method (``*`` for any) and exactly that path; a path ending in
    ``*`` matches every path starting with what comes before it. The query is never matched."""

    method: str
    path: str
    prefix: bool

    @classmethod
    def parse(cls, text: str) -> Pattern:
        parts = text.split() if isinstance(text, str) else []
        if len(parts) != 2:
            raise ValueError(f"{text!r} is not 'METHOD /path' (e.g. 'POST /api/cases/')")
        method, path = parts
        if method != "*" and not (method.isascii() and method.isalpha() and method.isupper()):
            raise ValueError(f"{text!r}: the method must be upper case letters or '*'")
        if not path.startswith("/"):
            raise ValueError(f"{text!r}: the path must start with '/'")
        if path.startswith(CONTROL_PREFIX):
            raise ValueError(f"{text!r}: {CONTROL_PREFIX} is the proxy's own control API")
        prefix = path.endswith("*")
        return cls(method, path[:-1] if prefix else path, prefix)

    def matches(self, method: str, path: str) -> bool:
        if self.method not in ("*", method):
            return False
        return path.startswith(self.path) if self.prefix else path == self.path

    def __str__(self) -> str:
        return f"{self.method} {self.path}{'*' if self.prefix else ''}"


@dataclass
class Fault:
    seq: int
    target: str
    pattern: Pattern
    mode: str
    remaining: int
    delay_ms: int | None
    retry_after: str | None

    def describe(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "match": str(self.pattern),
            "mode": self.mode,
            "remaining": self.remaining,
            "delay_ms": self.delay_ms,
            "retry_after": self.retry_after,
        }

    def delay_seconds(self) -> float:
        delay_ms = self.delay_ms if self.delay_ms is not None else DEFAULT_DELAY_MS[self.mode]
        return delay_ms / 1000.0


@dataclass
class Counters:
    seen: int = 0
    forwarded: int = 0  # the upstream answered: it has acted on the request
    upstream_unreachable: int = 0  # could not connect: nothing was sent, the client got a 502
    upstream_lost: int = 0  # sent, no answer from the upstream: the client's connection dropped
    faulted: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seen": self.seen,
            "forwarded": self.forwarded,
            "upstream_unreachable": self.upstream_unreachable,
            "upstream_lost": self.upstream_lost,
            "faulted": dict(sorted(self.faulted.items())),
        }


class ProxyState:
    """Armed faults and counters, shared by every handler thread (one lock guards all)."""

    def __init__(self, targets: dict[str, str] | None = None) -> None:
        self.lock = threading.Lock()
        self.named = {name: Pattern.parse(text) for name, text in (targets or {}).items()}
        self.faults: list[Fault] = []
        self.next_seq = 1
        self.held = 0
        self.release_generation = 0
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.total = Counters()
        # Every named target, and every pattern a fault was ever armed on, has counters.
        self.patterns: dict[str, Pattern] = dict(self.named)
        self.counters: dict[str, Counters] = {key: Counters() for key in self.patterns}

    def resolve(self, target: str) -> tuple[str, Pattern]:
        """A named target, or a ``METHOD /path`` pattern (written in its canonical form)."""
        if target in self.named:
            return target, self.named[target]
        pattern = Pattern.parse(target)
        return str(pattern), pattern

    def arm(self, target: str, mode: str, count: int, delay_ms, retry_after) -> Fault:
        key, pattern = self.resolve(target)
        with self.lock:
            fault = Fault(self.next_seq, key, pattern, mode, count, delay_ms, retry_after)
            self.next_seq += 1
            self.faults.append(fault)
            self.patterns.setdefault(key, pattern)
            self.counters.setdefault(key, Counters())
            return fault

    def begin(self, method: str, path: str) -> tuple[Fault | None, list[str]]:
        """Count a request against every target it matches and consume the oldest fault armed
        for any of them; return that fault (a snapshot) and the matched targets."""
        with self.lock:
            keys = [key for key, pattern in self.patterns.items() if pattern.matches(method, path)]
            self.total.seen += 1
            for key in keys:
                self.counters[key].seen += 1
            fault = next((f for f in self.faults if f.pattern.matches(method, path)), None)
            if fault is None:
                return None, keys
            fault.remaining -= 1
            if fault.remaining == 0:
                self.faults.remove(fault)
            for counters in (self.total, *(self.counters[key] for key in keys)):
                counters.faulted[fault.mode] = counters.faulted.get(fault.mode, 0) + 1
            return dataclasses.replace(fault), keys

    def count(self, keys: list[str], what: str) -> None:
        with self.lock:
            for counters in (self.total, *(self.counters[key] for key in keys)):
                setattr(counters, what, getattr(counters, what) + 1)

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def reset(self) -> None:
        with self.lock:
            self.faults.clear()
            self._reset_counters()

    def pending(self) -> list[dict[str, Any]]:
        with self.lock:
            return [fault.describe() for fault in self.faults]

    def hold_started(self) -> int:
        with self.lock:
            self.held += 1
            return self.release_generation

    def hold_ended(self) -> None:
        with self.lock:
            self.held -= 1

    def released_since(self, generation: int) -> bool:
        with self.lock:
            return self.release_generation != generation

    def release(self) -> int:
        with self.lock:
            self.release_generation += 1
            return self.held

    def stats(self, upstream: str) -> dict[str, Any]:
        with self.lock:
            return {
                "upstream": upstream,
                "total": self.total.as_dict(),
                "targets": {
                    key: {"match": str(self.patterns[key]), **self.counters[key].as_dict()}
                    for key in sorted(self.counters)
                },
                "faults_pending": [fault.describe() for fault in self.faults],
                "held": self.held,
            }


class InvalidFaultError(ValueError):
    pass


def validate_fault(payload: Any, state: ProxyState) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidFaultError("the body must be a JSON object")
    unknown = sorted(set(payload) - FAULT_FIELDS)
    if unknown:
        raise InvalidFaultError(f"unknown fields {unknown}; allowed: {sorted(FAULT_FIELDS)}")
    target = payload.get("target")
    if not isinstance(target, str) or not target.strip():
        raise InvalidFaultError(
            "'target' must be a named target "
            f"({sorted(state.named) or 'none configured'}) or 'METHOD /path'"
        )
    try:
        state.resolve(target)
    except ValueError as exc:
        raise InvalidFaultError(f"'target': {exc}") from None
    mode = payload.get("mode")
    if mode not in MODES:
        raise InvalidFaultError(f"'mode' must be one of {list(MODES)}")
    count = payload.get("count", 1)
    if not _is_int(count) or count < 1:
        raise InvalidFaultError("'count' must be a positive integer")
    delay_ms = payload.get("delay_ms")
    if delay_ms is not None:
        if mode not in DELAY_MODES:
            raise InvalidFaultError(f"'delay_ms' applies only to {list(DELAY_MODES)}")
        if not _is_int(delay_ms) or delay_ms < 0:
            raise InvalidFaultError("'delay_ms' must be a non-negative integer")
    retry_after = payload.get("retry_after")
    if retry_after is not None:
        if mode not in RETRY_AFTER_MODES:
            raise InvalidFaultError(f"'retry_after' applies only to {list(RETRY_AFTER_MODES)}")
        if _is_int(retry_after) and retry_after >= 0:
            retry_after = str(retry_after)
        elif not (
            isinstance(retry_after, str)
            and 0 < len(retry_after) <= 100
            and retry_after.isascii()
            and retry_after.isprintable()
        ):
            raise InvalidFaultError(
                "'retry_after' must be seconds (an integer >= 0) or an HTTP date string"
            )
    return {
        "target": target,
        "mode": mode,
        "count": count,
        "delay_ms": delay_ms,
        "retry_after": retry_after,
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- the upstream ------------------------------------------------------------------------------


class NotSent(Exception):
    """The upstream could not be reached: it cannot have acted on the request."""


class LostAfterSending(Exception):
    """The request went to the upstream, which then gave no answer: it may have acted."""


@dataclass
class Answer:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True)
class Upstream:
    scheme: str
    host: str
    port: int | None
    base_path: str
    url: str

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream {url!r} must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError(f"upstream {url!r} must not carry a query or a fragment")
        return cls(
            parts.scheme, parts.hostname, parts.port, parts.path.rstrip("/"), url.rstrip("/")
        )

    def send(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes | None, timeout
    ) -> Answer:
        """One request on a fresh connection: a reused one could have been closed by the
        upstream in between, and that failure would look like a lost answer."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        connection = cls(self.host, self.port, timeout=timeout)
        try:
            try:
                connection.connect()
            except OSError as exc:
                raise NotSent(f"cannot connect to {self.url}: {exc}") from exc
            try:
                connection.putrequest(method, self.base_path + target, skip_accept_encoding=True)
                for name, value in headers:
                    connection.putheader(name, value)
                connection.endheaders(body)
                response = connection.getresponse()
                answer = Answer(
                    response.status, response.reason, response.getheaders(), response.read()
                )
            except (OSError, http.client.HTTPException) as exc:
                raise LostAfterSending(f"{type(exc).__name__}: {exc}") from exc
        finally:
            connection.close()
        return answer


def connection_tokens(values: list[str]) -> set[str]:
    """Header names a Connection header lists: hop-by-hop for this one hop only."""
    return {token.strip().lower() for value in values for token in value.split(",")}


# -- the HTTP handler --------------------------------------------------------------------------


class ProxyHandler(BaseHTTPRequestHandler):
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

    # -- forwarding ----------------------------------------------------------------------------

    def proxy(self, path: str, query: str) -> None:
        body = self.read_body()
        if body is None:
            return
        state = self.server.state
        fault, keys = state.begin(self.command, path)
        target = path + (f"?{query}" if query else "")
        if fault is None:
            self.relay(self.forward(target, body, keys))
            return
        logger.info("fault %s/%s fires on %s %s", fault.target, fault.mode, self.command, target)
        mode = fault.mode
        if mode in ERROR_FAULTS:
            status, code = ERROR_FAULTS[mode]
            extra = []
            retry_after = fault.retry_after or ("1" if mode == "error_503" else None)
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

    # -- control API ---------------------------------------------------------------------------

    def control(self, path: str) -> None:
        state = self.server.state
        routes = {
            ("GET", "/_proxy/stats"): lambda: (200, state.stats(self.server.upstream.url)),
            ("GET", "/_proxy/faults"): lambda: (200, {"faults_pending": state.pending()}),
            ("POST", "/_proxy/faults"): self.control_arm,
            ("DELETE", "/_proxy/faults"): self.control_clear,
            ("POST", "/_proxy/release"): lambda: (200, {"released": state.release()}),
            ("POST", "/_proxy/reset"): self.control_reset,
        }
        body = self.read_body()
        if body is None:
            return
        self.control_body = body
        route = routes.get((self.command, path))
        if route is not None:
            status, payload = route()
            self.answer_json(status, payload)
            return
        allowed = sorted(method for method, route_path in routes if route_path == path)
        if allowed:
            methods = ", ".join(allowed)
            detail = f"allowed: {methods}"
            self.answer_json(
                405, {"error": "method_not_allowed", "detail": detail}, [("Allow", methods)]
            )
        else:
            self.answer_json(404, {"error": "not_found", "detail": f"no control route {path}"})

    def control_arm(self) -> tuple[int, dict[str, Any]]:
        state = self.server.state
        try:
            payload = json.loads(self.control_body or b"null")
        except ValueError as exc:
            return 400, {"error": "malformed_json", "detail": f"not valid JSON: {exc}"}
        try:
            fault = validate_fault(payload, state)
        except InvalidFaultError as exc:
            return 400, {"error": "invalid_fault", "detail": str(exc)}
        armed = state.arm(**fault)
        return 201, {"fault": armed.describe(), "faults_pending": state.pending()}

    def control_clear(self) -> tuple[int, dict[str, Any]]:
        self.server.state.clear_faults()
        return 200, {"faults_pending": []}

    def control_reset(self) -> tuple[int, dict[str, Any]]:
        self.server.state.reset()
        return 200, self.server.state.stats(self.server.upstream.url)

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


class FaultProxyServer(ThreadingHTTPServer):
    daemon_threads = True  # held requests must not keep a stopping proxy alive

    def __init__(
        self,
        upstream: str,
        host: str = "127.0.0.1",
        port: int = 0,
        targets: dict[str, str] | None = None,
        upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT_SECONDS,
    ) -> None:
        host = loopback_host(host)
        self.upstream = Upstream.parse(upstream)
        self.state = ProxyState(targets)
        self.upstream_timeout = upstream_timeout
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), ProxyHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    upstream: str,
    host: str = "127.0.0.1",
    port: int = 0,
    targets: dict[str, str] | None = None,
    upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT_SECONDS,
) -> None:
    """Serve until SIGTERM or Ctrl-C; the first line on stdout names the bound URL."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    server = FaultProxyServer(upstream, host, port, targets, upstream_timeout)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    print(f"fault proxy listening on {server.url} -> {server.upstream.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    logger.info("fault proxy stopped")


def parse_targets(values: Sequence[str]) -> dict[str, str]:
    targets = {}
    for value in values:
        name, sep, pattern = value.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--target {value!r}: expected NAME='METHOD /path'")
        Pattern.parse(pattern)
        targets[name.strip()] = pattern.strip()
    return targets


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.faultproxy",
        description="Forward to one upstream over HTTP and inject faults (test equipment).",
    )
    parser.add_argument("--upstream", required=True, help="base URL to forward every request to")
    parser.add_argument(
        "--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8766, help="TCP port; 0 picks a free one")
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME='METHOD /path'",
        help="name a target for faults and stats, e.g. crm.create='POST /api/cases/' (repeat)",
    )
    parser.add_argument(
        "--upstream-timeout",
        type=float,
        default=DEFAULT_UPSTREAM_TIMEOUT_SECONDS,
        help="seconds to wait for the upstream's answer (default 60)",
    )
    args = parser.parse_args(argv)
    try:
        targets = parse_targets(args.target)
        loopback_host(args.host)
        Upstream.parse(args.upstream)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        serve(args.upstream, args.host, args.port, targets, args.upstream_timeout)
    except OSError as exc:
        parser.exit(1, f"fault proxy: cannot listen on {args.host}:{args.port}: {exc}\n")


# -- the process wrapper for tests and the drill ----------------------------------------------

PROJECT_ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 10.0
CONTROL_TIMEOUT_SECONDS = 10.0
LOG_TAIL_CHARS = 4000

# Control calls go straight to the local process, never through an environment proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FaultProxyError(RuntimeError):
    """The proxy process did not start, or a control call failed."""


class FaultProxy:
    """The fault proxy as a separate process, started on entering the ``with`` block:

    with FaultProxy(sandbox.url, targets={"crm.create": "POST /crm/enquiries"}) as proxy:
        proxy.fault("crm.create", "drop_after_forward")
        ...  # point the code under test at proxy.url
        assert proxy.stats()["targets"]["crm.create"]["forwarded"] == 1
    """

    def __init__(
        self,
        upstream_url: str,
        *,
        targets: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT_SECONDS,
        startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    ) -> None:
        # Refuse here, before any process exists, as the server itself would.
        self.host = loopback_host(host)
        Upstream.parse(upstream_url)
        self.targets = {name: str(Pattern.parse(text)) for name, text in (targets or {}).items()}
        self.upstream_url = upstream_url
        self.requested_port = port
        self.port: int | None = None
        self.upstream_timeout = upstream_timeout
        self.startup_timeout = startup_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._process: subprocess.Popen[bytes] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        from config.waiting import wait_until
        from sandbox.testing import free_port

        if self.running:
            raise FaultProxyError(f"fault proxy already running at {self.url}")
        self.port = self.requested_port or free_port(self.host)
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="faultproxy-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        command = [
            sys.executable,
            "-m",
            "harness.faultproxy",
            "--upstream",
            self.upstream_url,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--upstream-timeout",
            str(self.upstream_timeout),
        ]
        for name, pattern in self.targets.items():
            command += ["--target", f"{name}={pattern}"]
        log_offset = self._log_path.stat().st_size if self._log_path.exists() else 0
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                command,
                cwd=PROJECT_ROOT,  # `-m harness.faultproxy` finds the package from here
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        try:
            answered = wait_until(
                self._answers_or_exited,
                timeout=self.startup_timeout,
                what=f"fault proxy answering on {self.url}",
                error=FaultProxyError,
            )
        except FaultProxyError as exc:
            self.kill()
            raise FaultProxyError(f"{exc}; its output:\n{self._log_since(log_offset)}") from None
        if answered == "exited":
            code = self._process.returncode
            self._process = None
            raise FaultProxyError(
                f"fault proxy exited with code {code} before answering on {self.url}; "
                f"its output:\n{self._log_since(log_offset)}"
            )
        return self

    def stop(self) -> None:
        """SIGTERM, then wait for an orderly exit (SIGKILL if it does not come)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait()

    def kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def url(self) -> str:
        if self.port is None:
            raise FaultProxyError("fault proxy not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def __enter__(self) -> FaultProxy:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- control API ---------------------------------------------------------------------------

    def fault(
        self,
        target: str,
        mode: str,
        count: int = 1,
        delay_ms: int | None = None,
        retry_after: int | str | None = None,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"target": target, "mode": mode, "count": count}
        if delay_ms is not None:
            payload["delay_ms"] = delay_ms
        if retry_after is not None:
            payload["retry_after"] = retry_after
        return self._control("POST", "/_proxy/faults", payload)

    def clear_faults(self) -> dict[str, Any]:
        return self._control("DELETE", "/_proxy/faults")

    def faults(self) -> list[dict[str, Any]]:
        return self._control("GET", "/_proxy/faults")["faults_pending"]

    def stats(self) -> dict[str, Any]:
        return self._control("GET", "/_proxy/stats")

    def release(self) -> int:
        """End every hold now (a ``late`` request is forwarded); returns how many were held."""
        return self._control("POST", "/_proxy/release")["released"]

    def reset(self) -> dict[str, Any]:
        return self._control("POST", "/_proxy/reset")

    # -- internals -----------------------------------------------------------------------------

    def _answers_or_exited(self) -> str | None:
        if self._process.poll() is not None:
            return "exited"
        request = urllib.request.Request(self.url + "/_proxy/stats")
        try:
            with _opener.open(request, timeout=1.0) as response:
                response.read()
                # Another process may hold the port we picked.
                if response.headers.get("X-Fault-Proxy-Pid") == str(self.pid):
                    return "answered"
        except OSError:
            pass
        return None

    def _log_since(self, offset: int) -> str:
        try:
            with open(self._log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode("utf-8", "replace")
        except (OSError, TypeError) as exc:
            return f"(no output: {exc})"
        return text[-LOG_TAIL_CHARS:] or "(no output)"

    def _control(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with _opener.open(request, timeout=CONTROL_TIMEOUT_SECONDS) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                body = exc.read().decode("utf-8", "replace")
            raise FaultProxyError(f"{method} {path} -> {exc.code}: {body}") from None


if __name__ == "__main__":
    main()
