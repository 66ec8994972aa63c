"""The fake CRM: ``/crm/enquiries`` (create by reference, look up by reference, get, close)."""

from __future__ import annotations

from sandbox.http import (
    ITEM_ID,
    HttpError,
    Request,
    Response,
    idempotent_create,
    optional_string,
    required_param,
    required_string,
    route,
)
from sandbox.store import Store


def create(store: Store, request: Request) -> Response:
    payload = request.json_object()
    required_string(payload, "reference")
    return idempotent_create(
        store, request, lambda key: store.create_enquiry(payload, key), status=201
    )


def lookup(store: Store, request: Request) -> Response:
    capabilities = store.capabilities()
    if not capabilities["lookup"]:
        raise HttpError(501, "lookup_unsupported", "this CRM cannot search by reference")
    reference = required_param(request, "reference")
    lag = float(capabilities["lookup_lag_seconds"])
    return Response(200, {"results": store.find_enquiries(reference, lag)})


def get(store: Store, request: Request, item_id: str) -> Response:
    record = store.get_enquiry(item_id)
    if record is None:
        raise HttpError(404, "not_found", f"no enquiry {item_id}")
    return Response(200, record)


def close(store: Store, request: Request, item_id: str) -> Response:
    payload = request.json_object(optional=True)
    reason = optional_string(payload, "reason")
    record = store.close_enquiry(item_id, reason)
    if record is None:
        raise HttpError(404, "not_found", f"no enquiry {item_id}")
    return Response(200, record)


ROUTES = [
    route("POST", r"/crm/enquiries", create, "crm.create"),
    route("GET", r"/crm/enquiries", lookup, "crm.lookup"),
    route("GET", rf"/crm/enquiries/{ITEM_ID}", get, "crm.get"),
    route("POST", rf"/crm/enquiries/{ITEM_ID}/close", close, "crm.close"),
]
