"""A database wait that ran out answers 503 "busy, try again", never a 500 traceback.

Every connection gives up waiting for a lock after DB_LOCK_TIMEOUT_SECONDS, and a web
process's statements stop after DB_STATEMENT_TIMEOUT_SECONDS (config/settings.py). Either one
rolls the request's transaction back, so nothing was changed: the person (or the sender, for
the intake endpoint, whose Standard Webhooks client retries a 503) can simply try again.
"""

import logging

from django.db import OperationalError
from django.shortcuts import render
from psycopg import errors

log = logging.getLogger("handover.database")

# SQLSTATE 55P03 (lock_timeout) and 57014 (statement_timeout).
BUSY = (errors.LockNotAvailable, errors.QueryCanceled)
RETRY_AFTER_SECONDS = 5


def database_busy(exception) -> bool:
    return isinstance(exception, OperationalError) and isinstance(exception.__cause__, BUSY)


class DatabaseBusyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not database_busy(exception):
            return None
        log.warning(
            "database busy: %s method=%s path=%s",
            type(exception.__cause__).__name__,
            request.method,
            request.path,
        )
        if request.path.startswith("/intake/"):
            from django.http import JsonResponse

            response = JsonResponse(
                {"error": "busy", "detail": "The database is busy; send the event again."},
                status=503,
            )
        else:
            response = render(request, "503.html", status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
