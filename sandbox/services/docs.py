"""The fake document store: ``PUT``/``GET /docs/<id>`` (a new version per put; JSON or text)."""

from __future__ import annotations

import json

from sandbox.http import HttpError, Request, Response, is_json_type, positive_int_param, route
from sandbox.store import Store

DOC_ID = r"(?P<doc_id>[A-Za-z0-9][A-Za-z0-9._:-]{0,199})"


def put(store: Store, request: Request, doc_id: str) -> Response:
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
            raise HttpError(400, "malformed_json", f"document is not valid JSON: {exc}") from exc
    return Response(201, store.put_document(doc_id, content_type, text))


def get(store: Store, request: Request, doc_id: str) -> Response:
    if not store.document_allowed(doc_id):
        raise HttpError(403, "access_denied", f"access to {doc_id} is revoked")
    version = positive_int_param(request, "version")
    document = store.get_document(doc_id, version)
    if document is None:
        raise HttpError(404, "not_found", f"no document {doc_id}")
    if is_json_type(document["content_type"]):
        document["content"] = json.loads(document["content"])
    return Response(200, document)


ROUTES = [
    route("PUT", rf"/docs/{DOC_ID}", put, "docs.put"),
    route("GET", rf"/docs/{DOC_ID}", get, "docs.get"),
]
