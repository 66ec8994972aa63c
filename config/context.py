"""Request identity and access rules that every request passes through."""

import contextvars
import uuid
from functools import wraps

_request_id = contextvars.ContextVar("handover_request_id", default="")


def current_request_id() -> str:
    return _request_id.get() or ""


def set_request_id(value: str | None = None) -> contextvars.Token:
    return _request_id.set(value or uuid.uuid4().hex)


def background_run(kind: str):
    """Give each run of a task, the sweeper or the escalation job its own request id
    (``<kind>-<32 hex>``), so every journal row it writes cites the run that wrote it. Run
    inside a request (a synchronous cluster, a console action that sweeps) it keeps the
    request's id: the request is the run."""

    def decorate(function):
        @wraps(function)
        def run(*args, **kwargs):
            if current_request_id():
                return function(*args, **kwargs)
            token = set_request_id(f"{kind}-{uuid.uuid4().hex}")
            try:
                return function(*args, **kwargs)
            finally:
                _request_id.reset(token)

        return run

    return decorate


class RequestIdMiddleware:
    """Give each request an ID (or keep a sane one from upstream) so journal rows can cite it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        if not (incoming.isascii() and incoming.replace("-", "").isalnum() and len(incoming) <= 64):
            incoming = ""
        token = set_request_id(incoming or None)
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = current_request_id()
            return response
        finally:
            _request_id.reset(token)
