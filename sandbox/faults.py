"""What faults the sandbox can arm, and what each does to the call it fires on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sandbox.http import DropConnection, HttpError, Request, Response, error_response, is_int
from sandbox.store import RATE_LIMITED, Fault

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
    "echo_headers",
    "redirect",
    *ERROR_FAULTS,
)
DELIVERY_FAULT_MODES = ("fail",)
DEFAULT_DELAY_MS = {"timeout_after_commit": 5000, "latency": 1000}


def answer_with_fault(
    fault: Fault, handle: Callable[[], Response], request: Request | None = None
) -> Response:
    """The answer to a call on which ``fault`` fired; ``handle()`` runs the call itself."""
    if fault.mode == "echo_headers":
        # As some servers do in an error page: the request's headers, credentials included,
        # sent back in a 400. Nothing is written.
        received = {} if request is None else request.all_headers()
        return error_response(400, "bad_request", f"received headers: {received}")
    if fault.mode == "redirect":
        # A redirect to another path of this host, where a client that follows it would send
        # the same headers again. Nothing is written.
        response = error_response(302, "found", "moved")
        response.headers.append(("Location", "/crm/enquiries?redirected=1"))
        return response
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
    response = handle()
    if fault.mode == "timeout_after_commit":
        # The handler has already committed; only the answer is late, so a client with a
        # shorter timeout gives up although the record exists.
        time.sleep(fault_delay_seconds(fault))
    return response


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
