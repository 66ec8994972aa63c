"""Odd input answered 400 before anything reaches the database.

PostgreSQL text cannot hold a NUL character: a ``%00`` in a path, a query value, a form field, a
cookie or a header would reach a query as a ``DataError`` (a 500) wherever a view or a library
(the admin's filters, the session lookup, django-axes' log of a failed login) uses it. No value
of Handover's has a reason to contain one, so ``RefuseNulMiddleware`` refuses the whole request
with 400 before any view, session or authentication code runs. The intake endpoint's JSON body
is its own validator's business (intake/payload.py): its body is never parsed as a form here,
even when a sender declares one (a multipart type without a boundary made Django's parser
answer an HTML 400; with one, it consumed the body, so the signature could not match). The
endpoint answers any non-JSON type with its own JSON 415.
"""

import logging

from django.core.exceptions import BadRequest

log = logging.getLogger("handover.security")

NUL = "\x00"
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
INTAKE_PATH = "/intake/events/"  # intake/urls.py: bodies there are JSON, read by the view
# config/urls.py: a provider's signed form of a resident's e-mail, which may carry a NUL (a
# byte in a mail body); ledger.inbound keeps it readable, so the reply is never refused.
INBOUND_PATH = "/inbound/"


def _has_nul(querydict) -> bool:
    return any(NUL in key or any(NUL in v for v in values) for key, values in querydict.lists())


def nul_in(request) -> str | None:
    """Where the request carries a NUL, in the sender's words; None when it carries none."""
    if NUL in request.path_info:
        return "the address"
    if _has_nul(request.GET):
        return "the query string"
    if any(NUL in key or NUL in value for key, value in request.COOKIES.items()):
        return "a cookie"
    if any(key.startswith("HTTP_") and NUL in str(value) for key, value in request.META.items()):
        return "a header"
    form = request.method not in ("GET", "HEAD", "OPTIONS") and request.content_type in FORM_TYPES
    own_reader = request.path_info.startswith((INTAKE_PATH, INBOUND_PATH))
    if form and not own_reader and _has_nul(request.POST):
        return "the form"
    return None


class RefuseNulMiddleware:
    """400 for a request with a NUL character anywhere a view or the database could see it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = nul_in(request)
        if where is not None:
            # Only the path: the value may be personal data (and is the bad input itself).
            log.info("refused: NUL in %s method=%s", where, request.method)
            raise BadRequest(f"A NUL character in {where}: no value here may contain one.")
        return self.get_response(request)
