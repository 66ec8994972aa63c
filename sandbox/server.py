"""The sandbox: a stand-in for other people's CRM, notification provider, document store and
appointments service, with fault injection, as a plain WSGI application.

The application itself is standard library only (plus ``sandbox.store`` on sqlite3), so it runs
without Django and imports nothing from the project's other apps. ``serve()`` runs it under
waitress, a real threaded HTTP server, which is imported only there.

Request flow for a service endpoint (anything not under ``/_sandbox/``):
    token check -> route -> count the call and consume the oldest armed fault for its target
    -> apply the fault (answer an error, drop the connection, sleep) -> handler -> maybe hold
    the already-committed response (``timeout_after_commit``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, quote

from sandbox.store import (
    DEFAULT_CAPABILITIES,
    RATE_LIMIT_SCOPES,
    RATE_LIMITED,
    Fault,
    IdempotencyKeyReusedError,
    Store,
    iso,
    utc_now,
)

logger = logging.getLogger("sandbox")

MAX_BODY_BYTES = 1024 * 1024

# Every target a fault can be armed on. notify.deliver is not an HTTP call: it is consulted when
# a message is accepted and decides whether that message later reports "failed".
SERVICE_TARGETS = (
    "crm.create",
    "crm.lookup",
    "crm.get",
    "crm.close",
    "notify.send",
    "notify.status",
    "docs.put",
    "docs.get",
    "appointments.list",
)
FAULT_TARGETS = (*SERVICE_TARGETS, "notify.deliver")

ERROR_FAULTS = {
    "error_503": (503, "service_unavailable"),
    "error_401": (401, "unauthorized"),
    "error_422": (422, "unprocessable_entity"),
}
CALL_FAULT_MODES = (
    "timeout_after_commit",
    "reset_before_commit",
    "latency",
    "error_429",
    *ERROR_FAULTS,
)
DELIVERY_FAULT_MODES = ("fail",)
DEFAULT_DELAY_MS = {"timeout_after_commit": 5000, "latency": 1000}

APPOINTMENT_MAX_AGE_SECONDS = 300
APPOINTMENT_DAY = (9, 17)  # opening hours, UTC
APPOINTMENT_SLOT_MINUTES = 30

DOC_ID = r"(?P<doc_id>[A-Za-z0-9][A-Za-z0-9._:-]{0,199})"


class HttpError(Exception):
    def __init__(
        self, status: int, code: str, detail: str = "", headers: Iterable[tuple[str, str]] = ()
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = list(headers)

    def response(self) -> Response:
        response = error_response(self.status, self.code, self.detail)
        response.headers.extend(self.headers)
        return response


class DropConnection(Exception):
    """Raised by a handler path to close the TCP connection without any HTTP response."""


@dataclass
class Response:
    status: int
    body: Any
    headers: list[tuple[str, str]] = field(default_factory=list)


def error_response(status: int, code: str, detail: str = "") -> Response:
    return Response(status, {"error": code, "detail": detail})


class Request:
    def __init__(self, environ: dict[str, Any]) -> None:
        # When the call arrived, before it waits for the store's lock: what the per-second
        # counts and the rate limit count (a caller is not charged for our own queueing).
        self.arrived = time.time()
        self.environ = environ
        self.method = environ.get("REQUEST_METHOD", "GET").upper()
        # WSGI hands PATH_INFO over as latin-1-decoded bytes; recover the UTF-8 text.
        raw_path = environ.get("PATH_INFO") or "/"
        self.path = raw_path.encode("latin-1").decode("utf-8", "replace")
        self.query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        # The path as the client sent it (still percent-encoded): waitress gives REQUEST_URI,
        # gunicorn RAW_URI; otherwise PATH_INFO, re-encoded.
        raw_uri = environ.get("REQUEST_URI") or environ.get("RAW_URI")
        self.raw_path = raw_uri.split("?", 1)[0] if raw_uri else quote(raw_path, safe="/")
        self._body: bytes | None = None

    def header(self, name: str) -> str | None:
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            return self.environ.get(key)
        return self.environ.get(f"HTTP_{key}")

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def body(self) -> bytes:
        if self._body is None:
            self._body = self._read_body()
        return self._body

    def _read_body(self) -> bytes:
        stream = self.environ.get("wsgi.input")
        if stream is None:
            return b""
        try:
            length = int(self.environ.get("CONTENT_LENGTH") or 0)
        except ValueError as exc:
            raise HttpError(400, "bad_request", "invalid Content-Length") from exc
        if length > MAX_BODY_BYTES:
            raise HttpError(413, "payload_too_large", f"body exceeds {MAX_BODY_BYTES} bytes")
        return stream.read(length) if length > 0 else b""

    def json_object(self, *, optional: bool = False) -> dict[str, Any]:
        """The body as a JSON object; an empty body is ``{}`` only when ``optional``."""
        if not self.body.strip() and optional:
            return {}
        try:
            payload = json.loads(self.body)
        except ValueError as exc:
            raise HttpError(
                400, "malformed_json", f"request body is not valid JSON: {exc}"
            ) from exc
        if not isinstance(payload, dict):
            raise HttpError(400, "invalid_request", "request body must be a JSON object")
        return payload


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Callable[..., Response]
    target: str | None  # None for control routes: never counted, never faulted


def required_string(payload: dict[str, Any], name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value.strip():
        raise HttpError(400, "invalid_request", f"'{name}' must be a non-empty string")
    return value


def optional_string(payload: dict[str, Any], name: str) -> str | None:
    value = payload.get(name)
    if value is not None and not isinstance(value, str):
        raise HttpError(400, "invalid_request", f"'{name}' must be a string")
    return value


def is_json_type(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


class SandboxApp:
    """The WSGI application. Thread-safe: all state is in the SQLite store."""

    def __init__(
        self,
        store: Store,
        token: str | None = None,
        abort_connection: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.store = store
        self.token = token
        self.abort_connection = abort_connection or abort_generic_connection
        self.routes = self._build_routes()

    # -- WSGI entry point ----------------------------------------------------------------------

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        request = Request(environ)
        try:
            response = self.respond(request)
        except DropConnection:
            logger.info("%s %s -> connection dropped (fault)", request.method, request.path)
            self.abort_connection(environ)  # raises: there is no response to send
            raise
        except Exception:
            logger.exception("unhandled error in %s %s", request.method, request.path)
            response = error_response(500, "internal_error", "unexpected sandbox error")
        logger.info("%s %s -> %s", request.method, request.path, response.status)
        return send(response, start_response)

    def respond(self, request: Request) -> Response:
        try:
            if not request.path.startswith("/_sandbox/"):
                self.store.count_path(request.method, request.raw_path)
                self._authorize(request)
            route, params = self._resolve(request)
            if route.target is None:
                return route.handler(request, **params)
            return self._call_service(route, request, params)
        except HttpError as exc:
            return exc.response()

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        supplied = request.header("Authorization") or ""
        expected = f"Bearer {self.token}"
        if not hmac.compare_digest(supplied.encode(), expected.encode()):
            raise HttpError(401, "unauthorized", "missing or wrong bearer token")

    def _resolve(self, request: Request) -> tuple[Route, dict[str, str]]:
        allowed = []
        for route in self.routes:
            match = route.pattern.fullmatch(request.path)
            if match is None:
                continue
            if route.method == request.method:
                return route, match.groupdict()
            allowed.append(route.method)
        if allowed:
            methods = ", ".join(sorted(allowed))
            raise HttpError(405, "method_not_allowed", f"allowed: {methods}", [("Allow", methods)])
        raise HttpError(404, "not_found", f"no route for {request.path}")

    def _call_service(self, route: Route, request: Request, params: dict[str, str]) -> Response:
        fault = self.store.begin_call(route.target, arrived=request.arrived)
        if fault is None:
            return self._invoke(route, request, params)
        logger.info(
            "fault %s/%s fires on %s %s", fault.target, fault.mode, request.method, request.path
        )
        if fault.mode in (RATE_LIMITED, "error_429"):
            # Too many requests: nothing is written; Retry-After in whole seconds, at least 1.
            seconds = max(1, -(-(fault.delay_ms or 1000) // 1000))
            detail = "rate limit exceeded" if fault.mode == RATE_LIMITED else "sandbox fault"
            response = error_response(429, "too_many_requests", detail)
            response.headers.append(("Retry-After", str(seconds)))
            return response
        if fault.mode in ERROR_FAULTS:
            # Answer before touching the store: nothing is written. A 503 names no time: an
            # outage, not a request to slow down (that is error_429).
            status, code = ERROR_FAULTS[fault.mode]
            return error_response(status, code, f"sandbox fault {fault.mode}")
        if fault.mode == "reset_before_commit":
            raise DropConnection
        if fault.mode == "latency":
            time.sleep(fault_delay_seconds(fault))
        response = self._invoke(route, request, params)
        if fault.mode == "timeout_after_commit":
            # The handler has already committed; only the answer is late, so a client with a
            # shorter timeout gives up although the record exists.
            time.sleep(fault_delay_seconds(fault))
        return response

    @staticmethod
    def _invoke(route: Route, request: Request, params: dict[str, str]) -> Response:
        try:
            return route.handler(request, **params)
        except HttpError as exc:
            return exc.response()

    def _build_routes(self) -> list[Route]:
        def route(method: str, path: str, handler: Callable[..., Response], target=None) -> Route:
            return Route(method, re.compile(path), handler, target)

        item = r"(?P<item_id>[^/]+)"
        return [
            route("POST", r"/crm/enquiries", self.crm_create, "crm.create"),
            route("GET", r"/crm/enquiries", self.crm_lookup, "crm.lookup"),
            route("GET", rf"/crm/enquiries/{item}", self.crm_get, "crm.get"),
            route("POST", rf"/crm/enquiries/{item}/close", self.crm_close, "crm.close"),
            route("POST", r"/notify/messages", self.notify_send, "notify.send"),
            route("GET", r"/notify/messages", self.notify_list, "notify.status"),
            route("GET", rf"/notify/messages/{item}", self.notify_get, "notify.status"),
            route("PUT", rf"/docs/{DOC_ID}", self.docs_put, "docs.put"),
            route("GET", rf"/docs/{DOC_ID}", self.docs_get, "docs.get"),
            route("GET", r"/appointments", self.appointments_list, "appointments.list"),
            route("GET", r"/_sandbox/stats", self.control_stats),
            route("POST", r"/_sandbox/reset", self.control_reset),
            route("GET", r"/_sandbox/faults", self.control_faults_list),
            route("POST", r"/_sandbox/faults", self.control_faults_add),
            route("DELETE", r"/_sandbox/faults", self.control_faults_clear),
            route("GET", r"/_sandbox/capabilities", self.control_capabilities_get),
            route("POST", r"/_sandbox/capabilities", self.control_capabilities_set),
            route("POST", rf"/_sandbox/docs/{DOC_ID}/access", self.control_doc_access),
        ]

    # -- CRM -----------------------------------------------------------------------------------

    def crm_create(self, request: Request) -> Response:
        payload = request.json_object()
        required_string(payload, "reference")
        key = self._idempotency_key(request)
        try:
            created = self.store.create_enquiry(payload, key)
        except IdempotencyKeyReusedError as exc:
            raise idempotency_error() from exc
        return created_response(created, status=201)

    def crm_lookup(self, request: Request) -> Response:
        capabilities = self.store.capabilities()
        if not capabilities["lookup"]:
            raise HttpError(501, "lookup_unsupported", "this CRM cannot search by reference")
        reference = required_param(request, "reference")
        lag = float(capabilities["lookup_lag_seconds"])
        return Response(200, {"results": self.store.find_enquiries(reference, lag)})

    def crm_get(self, request: Request, item_id: str) -> Response:
        record = self.store.get_enquiry(item_id)
        if record is None:
            raise HttpError(404, "not_found", f"no enquiry {item_id}")
        return Response(200, record)

    def crm_close(self, request: Request, item_id: str) -> Response:
        payload = request.json_object(optional=True)
        reason = optional_string(payload, "reason")
        record = self.store.close_enquiry(item_id, reason)
        if record is None:
            raise HttpError(404, "not_found", f"no enquiry {item_id}")
        return Response(200, record)

    # -- notifications -------------------------------------------------------------------------

    def notify_send(self, request: Request) -> Response:
        payload = request.json_object()
        for name in ("to", "template", "reference"):
            required_string(payload, name)
        optional_string(payload, "body")
        key = self._idempotency_key(request)
        delay_ms = float(self.store.capabilities()["delivery_delay_ms"])
        try:
            created = self.store.send_message(payload, key, delay_ms)
        except IdempotencyKeyReusedError as exc:
            raise idempotency_error() from exc
        return created_response(created, status=202)

    def notify_get(self, request: Request, item_id: str) -> Response:
        message = self.store.get_message(item_id)
        if message is None:
            raise HttpError(404, "not_found", f"no message {item_id}")
        return Response(200, message)

    def notify_list(self, request: Request) -> Response:
        reference = required_param(request, "reference")
        return Response(200, {"results": self.store.find_messages(reference)})

    # -- documents -----------------------------------------------------------------------------

    def docs_put(self, request: Request, doc_id: str) -> Response:
        content_type = (request.header("Content-Type") or "text/plain").split(";")[0]
        content_type = content_type.strip().lower() or "text/plain"
        try:
            text = request.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HttpError(400, "invalid_request", "document body must be UTF-8 text") from exc
        if not text:
            raise HttpError(400, "invalid_request", "document body is empty")
        if is_json_type(content_type):
            try:
                json.loads(text)
            except ValueError as exc:
                raise HttpError(
                    400, "malformed_json", f"document is not valid JSON: {exc}"
                ) from exc
        return Response(201, self.store.put_document(doc_id, content_type, text))

    def docs_get(self, request: Request, doc_id: str) -> Response:
        if not self.store.document_allowed(doc_id):
            raise HttpError(403, "access_denied", f"access to {doc_id} is revoked")
        version = positive_int_param(request, "version")
        document = self.store.get_document(doc_id, version)
        if document is None:
            raise HttpError(404, "not_found", f"no document {doc_id}")
        if is_json_type(document["content_type"]):
            document["content"] = json.loads(document["content"])
        return Response(200, document)

    # -- appointments --------------------------------------------------------------------------

    def appointments_list(self, request: Request) -> Response:
        raw = request.param("date") or ""
        try:
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
                raise ValueError(raw)
            day = date.fromisoformat(raw)
        except ValueError as exc:
            raise HttpError(400, "invalid_date", "'date' must be YYYY-MM-DD") from exc
        return Response(
            200,
            {
                "date": day.isoformat(),
                "slots": appointment_slots(day),
                "as_of": iso(utc_now()),
                "max_age_seconds": APPOINTMENT_MAX_AGE_SECONDS,
            },
        )

    # -- control -------------------------------------------------------------------------------

    def control_stats(self, request: Request) -> Response:
        return Response(200, self.store.stats())

    def control_reset(self, request: Request) -> Response:
        self.store.reset()
        return Response(200, self.store.stats())

    def control_faults_list(self, request: Request) -> Response:
        return Response(200, {"faults_pending": self.store.pending_faults()})

    def control_faults_add(self, request: Request) -> Response:
        fault = validate_fault(request.json_object())
        self.store.add_fault(**fault)
        return Response(201, {"fault": fault, "faults_pending": self.store.pending_faults()})

    def control_faults_clear(self, request: Request) -> Response:
        self.store.clear_faults()
        return Response(200, {"faults_pending": []})

    def control_capabilities_get(self, request: Request) -> Response:
        return Response(200, self.store.capabilities())

    def control_capabilities_set(self, request: Request) -> Response:
        changes = validate_capabilities(request.json_object())
        return Response(200, self.store.set_capabilities(changes))

    def control_doc_access(self, request: Request, doc_id: str) -> Response:
        allowed = request.json_object().get("allowed")
        if not isinstance(allowed, bool):
            raise HttpError(400, "invalid_request", "'allowed' must be true or false")
        self.store.set_document_access(doc_id, allowed)
        return Response(200, {"id": doc_id, "allowed": allowed})

    # -- shared --------------------------------------------------------------------------------

    def _idempotency_key(self, request: Request) -> str | None:
        # With the capability off the header is ignored, so a blind retry really duplicates.
        if not self.store.capabilities()["idempotency_key"]:
            return None
        key = (request.header("Idempotency-Key") or "").strip()
        return key or None


# -- helpers -----------------------------------------------------------------------------------


def send(response: Response, start_response: Callable[..., Any]) -> list[bytes]:
    payload = json.dumps(response.body, ensure_ascii=False).encode("utf-8")
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(payload))),
        ("Cache-Control", "no-store"),
        # Lets a test harness tell its own child from another process on the same port.
        ("X-Sandbox-Pid", str(os.getpid())),
        *response.headers,
    ]
    phrase = HTTPStatus(response.status).phrase
    start_response(f"{response.status} {phrase}", headers)
    return [payload]


def created_response(created: Any, status: int) -> Response:
    """First call: ``status``; a replay of an idempotency key: 200 with the first body."""
    if created.replayed:
        return Response(200, created.response, [("Idempotent-Replayed", "true")])
    return Response(status, created.response)


def idempotency_error() -> HttpError:
    return HttpError(422, "idempotency_error", "Idempotency-Key reused with a different body")


def required_param(request: Request, name: str) -> str:
    value = request.param(name)
    if not value:
        raise HttpError(400, "invalid_request", f"query parameter '{name}' is required")
    return value


def positive_int_param(request: Request, name: str) -> int | None:
    raw = request.param(name)
    if raw is None:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise HttpError(400, "invalid_request", f"'{name}' must be a positive integer")
    return int(raw)


def fault_delay_seconds(fault: Fault) -> float:
    delay_ms = fault.delay_ms if fault.delay_ms is not None else DEFAULT_DELAY_MS[fault.mode]
    return delay_ms / 1000.0


def validate_fault(payload: dict[str, Any]) -> dict[str, Any]:
    target = payload.get("target")
    mode = payload.get("mode")
    if target not in FAULT_TARGETS:
        raise HttpError(400, "invalid_fault", f"'target' must be one of {list(FAULT_TARGETS)}")
    modes = DELIVERY_FAULT_MODES if target == "notify.deliver" else CALL_FAULT_MODES
    if mode not in modes:
        raise HttpError(400, "invalid_fault", f"'mode' for {target} must be one of {list(modes)}")
    count = payload.get("count", 1)
    if not is_int(count) or count < 1:
        raise HttpError(400, "invalid_fault", "'count' must be a positive integer")
    delay_ms = payload.get("delay_ms")
    if delay_ms is not None and (not is_int(delay_ms) or delay_ms < 0):
        raise HttpError(400, "invalid_fault", "'delay_ms' must be a non-negative integer")
    return {"target": target, "mode": mode, "count": count, "delay_ms": delay_ms}


def validate_capabilities(payload: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(payload) - set(DEFAULT_CAPABILITIES))
    if unknown:
        raise HttpError(400, "invalid_capability", f"unknown capabilities: {unknown}")
    for name in ("lookup", "idempotency_key"):
        if name in payload and not isinstance(payload[name], bool):
            raise HttpError(400, "invalid_capability", f"'{name}' must be true or false")
    for name in ("lookup_lag_seconds", "delivery_delay_ms", "rate_limit_per_second"):
        if name in payload and (not is_number(payload[name]) or not 0 <= payload[name] < 1e9):
            raise HttpError(400, "invalid_capability", f"'{name}' must be a number >= 0")
    if "rate_limit_scope" in payload and payload["rate_limit_scope"] not in RATE_LIMIT_SCOPES:
        raise HttpError(
            400,
            "invalid_capability",
            f"'rate_limit_scope' must be one of {list(RATE_LIMIT_SCOPES)}",
        )
    return payload


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def appointment_slots(day: date) -> list[dict[str, Any]]:
    """Deterministic slots for a day: same date, same answer, across processes and restarts."""
    opening, closing = APPOINTMENT_DAY
    start = datetime(day.year, day.month, day.day, opening, tzinfo=utc_now().tzinfo)
    end_of_day = start.replace(hour=closing)
    step = timedelta(minutes=APPOINTMENT_SLOT_MINUTES)
    slots = []
    while start < end_of_day:
        digest = hashlib.sha256(start.isoformat().encode()).digest()
        slots.append(
            {
                "start": start.isoformat(),
                "end": (start + step).isoformat(),
                "available": digest[0] % 4 != 0,  # about three in four slots are free
            }
        )
        start += step
    return slots


# -- dropping a connection ---------------------------------------------------------------------


def abort_generic_connection(environ: dict[str, Any]) -> None:
    """Fallback for servers other than waitress: an OSError makes most of them hang up."""
    raise ConnectionAbortedError("sandbox fault: reset_before_commit")


def abort_waitress_connection(environ: dict[str, Any]) -> None:
    """Close the client's TCP connection with a RST and no HTTP response, under waitress.

    waitress exposes its channel only through the ``waitress.client_disconnected`` callable (a
    bound method of the channel). Setting SO_LINGER to 0 makes the eventual close() send a RST
    instead of a FIN. Raising waitress's ClientDisconnected makes it close the channel quietly
    without writing anything, where any other exception would become a 500 response.
    """
    from waitress.channel import ClientDisconnected

    channel = getattr(environ.get("waitress.client_disconnected"), "__self__", None)
    sock = getattr(channel, "socket", None)
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raise ClientDisconnected("sandbox fault: reset_before_commit")


# -- serving -----------------------------------------------------------------------------------


def serve(
    host: str = "127.0.0.1",
    port: int = 8765,
    data: str = "var/sandbox.sqlite3",
    token: str | None = None,
    threads: int = 16,
) -> None:
    """Serve the sandbox over HTTP with waitress until SIGTERM or Ctrl-C."""
    from waitress import create_server

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = SandboxApp(Store(data), token=token, abort_connection=abort_waitress_connection)
    server = create_server(app, host=host, port=port, threads=threads, ident="handover-sandbox")
    if threading.current_thread() is threading.main_thread():
        # SIGTERM becomes SystemExit, which waitress's run() turns into an orderly close.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    logger.info(
        "sandbox serving http://%s:%s data=%s token=%s threads=%s",
        host,
        getattr(server, "effective_port", port),
        data,
        "on" if token else "off",
        threads,
    )
    try:
        server.run()
    finally:
        close_waitress_server(server)
    logger.info("sandbox stopped")


def close_waitress_server(server: Any) -> None:
    """Close the listening socket, open connections and waitress's wake-up pipe.

    A single-socket waitress server's run() only stops the worker threads on SystemExit.
    """
    from waitress import wasyncore

    socket_map = getattr(server, "map", None) or getattr(server, "_map", None)
    if socket_map:
        wasyncore.close_all(socket_map)
    else:
        server.close()
