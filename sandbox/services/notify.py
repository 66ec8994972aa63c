"""The fake notification provider: ``/notify/messages`` (send, status by id or reference).

Whether a message ends "delivered" or "failed" is decided when it is sent, by a
``notify.deliver`` fault (see ``sandbox.store.notify``).
"""

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


def send(store: Store, request: Request) -> Response:
    payload = request.json_object()
    for name in ("to", "template", "reference"):
        required_string(payload, name)
    optional_string(payload, "body")
    delay_ms = float(store.capabilities()["delivery_delay_ms"])
    return idempotent_create(
        store, request, lambda key: store.send_message(payload, key, delay_ms), status=202
    )


def get(store: Store, request: Request, item_id: str) -> Response:
    message = store.get_message(item_id)
    if message is None:
        raise HttpError(404, "not_found", f"no message {item_id}")
    return Response(200, message)


def find(store: Store, request: Request) -> Response:
    reference = required_param(request, "reference")
    return Response(200, {"results": store.find_messages(reference)})


ROUTES = [
    route("POST", r"/notify/messages", send, "notify.send"),
    route("GET", r"/notify/messages", find, "notify.status"),
    route("GET", rf"/notify/messages/{ITEM_ID}", get, "notify.status"),
]
