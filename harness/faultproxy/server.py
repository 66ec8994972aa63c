"""The fault proxy's HTTP server: forward to one upstream, apply the fault that fires.

    python -m harness.faultproxy --upstream URL [--host 127.0.0.1] [--port 8766]
        [--target NAME='METHOD /path' ...] [--upstream-timeout 60]

Standard library only (``http.server`` threads, ``http.client`` upstream connections).
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import logging
import os
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from harness.faultproxy.faults import (
    CONTROL_PREFIX,
    ERROR_FAULTS,
    Fault,
    InvalidFaultError,
    Pattern,
    ProxyState,
    validate_fault,
)

logger = logging.getLogger("harness.faultproxy")
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
        parent_pid: int | None = None,
    ) -> None:
        host = loopback_host(host)
        self.parent_pid = parent_pid
        self.upstream = Upstream.parse(upstream)
        self.state = ProxyState(targets)
        self.upstream_timeout = upstream_timeout
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), ProxyHandler)

    def service_actions(self) -> None:
        # A test or drill that dies without stopping its proxy must not leave it listening:
        # once the parent is gone we are re-parented, and stop.
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            logger.info("parent %s is gone: stopping", self.parent_pid)
            raise SystemExit(0)

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
    parent_pid: int | None = None,
) -> None:
    """Serve until SIGTERM, Ctrl-C or (with ``parent_pid``) that parent's exit; the first line
    on stdout names the bound URL."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        server = FaultProxyServer(upstream, host, port, targets, upstream_timeout, parent_pid)
    except OSError as exc:
        raise SystemExit(f"fault proxy: cannot listen on {host}:{port}: {exc}") from None
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    print(f"fault proxy listening on {server.url} -> {server.upstream.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        logger.info("fault proxy stopped; requests it was holding are dropped")


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
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="stop when this process (the one that started the proxy) is gone",
    )
    args = parser.parse_args(argv)
    try:
        targets = parse_targets(args.target)
        loopback_host(args.host)
        Upstream.parse(args.upstream)
    except ValueError as exc:
        parser.error(str(exc))
    serve(args.upstream, args.host, args.port, targets, args.upstream_timeout, args.parent_pid)
