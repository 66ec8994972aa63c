"""The sandbox's HTTP layer on plain WSGI: requests, JSON responses, errors, routes, and the
checks every service shares (parameters, idempotency keys). Standard library only."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, quote

from sandbox.store import Created, IdempotencyKeyReusedError, Store

MAX_BODY_BYTES = 1024 * 1024
ITEM_ID = r"(?P<item_id>[^/]+)"  # a record's id as one path segment


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

    def all_headers(self) -> dict[str, str]:
        """Every header the request carried, by its name as sent (the echo_headers fault)."""
        return {
            key[5:].replace("_", "-").title(): value
            for key, value in self.environ.items()
            if key.startswith("HTTP_")
        }

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
    handler: Callable[..., Response]  # handler(store, request, **path_params)
    target: str | None  # None for control routes: never counted, never faulted


def route(method: str, path: str, handler: Callable[..., Response], target=None) -> Route:
    return Route(method, re.compile(path), handler, target)


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


# -- checks the services share -----------------------------------------------------------------


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


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_json_type(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def idempotent_create(
    store: Store,
    request: Request,
    create: Callable[[str | None], Created],
    *,
    status: int,
) -> Response:
    """Run ``create(idempotency_key)``: the first call answers ``status``, a replay of the key
    200 with the first body, the key reused with another body 422."""
    try:
        created = create(idempotency_key(store, request))
    except IdempotencyKeyReusedError as exc:
        raise HttpError(
            422, "idempotency_error", "Idempotency-Key reused with a different body"
        ) from exc
    if created.replayed:
        return Response(200, created.response, [("Idempotent-Replayed", "true")])
    return Response(status, created.response)


def idempotency_key(store: Store, request: Request) -> str | None:
    # With the capability off the header is ignored, so a blind retry really duplicates.
    if not store.capabilities()["idempotency_key"]:
        return None
    key = (request.header("Idempotency-Key") or "").strip()
    return key or None
