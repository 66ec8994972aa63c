"""The control plane, ``/_sandbox/``: stats, reset, faults, capabilities, document access.

Never counted, rate-limited or faulted, and open without the bearer token: it is for the
tests, the drill and the benchmarks, never for Handover.
"""

from __future__ import annotations

from typing import Any

from sandbox.faults import validate_fault
from sandbox.http import HttpError, Request, Response, is_number, route
from sandbox.services.docs import DOC_ID
from sandbox.store import DEFAULT_CAPABILITIES, RATE_LIMIT_SCOPES, Store


def stats(store: Store, request: Request) -> Response:
    return Response(200, store.stats())


def reset(store: Store, request: Request) -> Response:
    store.reset()
    return Response(200, store.stats())


def faults_list(store: Store, request: Request) -> Response:
    return Response(200, {"faults_pending": store.pending_faults()})


def faults_add(store: Store, request: Request) -> Response:
    fault = validate_fault(request.json_object())
    store.add_fault(**fault)
    return Response(201, {"fault": fault, "faults_pending": store.pending_faults()})


def faults_clear(store: Store, request: Request) -> Response:
    store.clear_faults()
    return Response(200, {"faults_pending": []})


def capabilities_get(store: Store, request: Request) -> Response:
    return Response(200, store.capabilities())


def capabilities_set(store: Store, request: Request) -> Response:
    changes = validate_capabilities(request.json_object())
    return Response(200, store.set_capabilities(changes))


def doc_access(store: Store, request: Request, doc_id: str) -> Response:
    allowed = request.json_object().get("allowed")
    if not isinstance(allowed, bool):
        raise HttpError(400, "invalid_request", "'allowed' must be true or false")
    store.set_document_access(doc_id, allowed)
    return Response(200, {"id": doc_id, "allowed": allowed})


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


ROUTES = [
    route("GET", r"/_sandbox/stats", stats),
    route("POST", r"/_sandbox/reset", reset),
    route("GET", r"/_sandbox/faults", faults_list),
    route("POST", r"/_sandbox/faults", faults_add),
    route("DELETE", r"/_sandbox/faults", faults_clear),
    route("GET", r"/_sandbox/capabilities", capabilities_get),
    route("POST", r"/_sandbox/capabilities", capabilities_set),
    route("POST", rf"/_sandbox/docs/{DOC_ID}/access", doc_access),
]
