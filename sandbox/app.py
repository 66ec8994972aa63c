"""The sandbox as a WSGI application: one stand-in for other people's CRM, notification
provider, document store and appointments service (``sandbox.services``), with fault injection.

Standard library only (plus ``sandbox.store`` on sqlite3), so it runs without Django and imports
nothing from the project's other apps; ``sandbox.server`` serves it under waitress.

Request flow for a service endpoint (anything not under ``/_sandbox/``):
    token check -> route -> count the call and consume the oldest armed fault for its target
    -> apply the fault (answer an error, drop the connection, sleep) -> handler -> maybe hold
    the already-committed response (``timeout_after_commit``).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable
from typing import Any

from sandbox.faults import answer_with_fault
from sandbox.http import (
    DropConnection,
    HttpError,
    Request,
    Response,
    Route,
    error_response,
    send,
)
from sandbox.services import appointments, control, crm, docs, notify
from sandbox.store import Store

logger = logging.getLogger("sandbox")

ROUTES = [*crm.ROUTES, *notify.ROUTES, *docs.ROUTES, *appointments.ROUTES, *control.ROUTES]


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
        self.routes = ROUTES

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
                return route.handler(self.store, request, **params)
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
        def handle() -> Response:
            try:
                return route.handler(self.store, request, **params)
            except HttpError as exc:
                return exc.response()

        fault = self.store.begin_call(route.target, arrived=request.arrived)
        if fault is None:
            return handle()
        logger.info(
            "fault %s/%s fires on %s %s", fault.target, fault.mode, request.method, request.path
        )
        return answer_with_fault(fault, handle, request)


def abort_generic_connection(environ: dict[str, Any]) -> None:
    """Fallback for servers other than waitress: an OSError makes most of them hang up."""
    raise ConnectionAbortedError("sandbox fault: reset_before_commit")
