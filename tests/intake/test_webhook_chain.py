"""The webhook endpoint's short middleware chain (config/webhooks.py).

Requests go through the WSGI application every web server loads, as a server hands them over,
so what is checked is the chain a sender meets (the test client would use MIDDLEWARE whole).
"""

import io
import json
import sys
import uuid

import pytest
from django.conf import settings
from django.core import signals
from django.db import close_old_connections, connection, connections

from intake.models import Enquiry, IntakeEvent
from ledger.models import JournalEntry
from tests.intake.conftest import SECRET, URL, fixture_bytes
from tests.intake.signing import signed_headers


def call(path, *, method="POST", body=b"", headers=None, host="testserver"):
    """(status code, headers, body) of ``path`` through config.webhooks.application."""
    from config.webhooks import application

    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": host,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.version": (1, 0),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for name, value in (headers or {}).items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    answer = {}

    def start_response(status, response_headers, exc_info=None):
        answer["status"] = int(status.split()[0])
        answer["headers"] = {k.lower(): v for k, v in response_headers}

    # As Django's test client does: the test's connection (and its transaction) stays open.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        result = application(environ, start_response)
        try:
            content = b"".join(result)
        finally:
            result.close()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)
    return answer["status"], answer["headers"], content


def test_the_webhook_chain_is_the_whole_chain_less_some_in_the_same_order():
    whole, short = settings.MIDDLEWARE, settings.WEBHOOK_MIDDLEWARE
    assert set(short) < set(whole)
    assert short == [m for m in whole if m in short]
    # What the endpoint needs: headers, its request id, 503 when busy, no NUL, ALLOWED_HOSTS.
    for needed in (
        "django.middleware.security.SecurityMiddleware",
        "config.context.RequestIdMiddleware",
        "config.busy.DatabaseBusyMiddleware",
        "config.inputs.RefuseNulMiddleware",
        "django.middleware.common.CommonMiddleware",
    ):
        assert needed in short


def test_the_webhook_handler_is_built_from_the_short_list_and_leaves_the_setting_alone():
    """What config.webhooks.WebhookHandler relies on: Django builds a handler's chain from
    settings.MIDDLEWARE when the handler is made, and not again."""
    from config.webhooks import WebhookHandler, console, webhooks

    whole = settings.MIDDLEWARE
    handler = WebhookHandler()
    assert settings.MIDDLEWARE is whole
    assert handler._view_middleware == webhooks._view_middleware
    # The short chain has no process_view hooks (CSRF, login required, axes have them) ...
    assert handler._view_middleware == []
    # ... the whole one has.
    assert len(console._view_middleware) >= 2


@pytest.mark.django_db(transaction=True)
def test_a_signed_event_through_the_short_chain_is_stored_with_its_request_id():
    body = fixture_bytes("phone_only.json")
    request_id = uuid.uuid4().hex

    status, headers, content = call(
        URL, body=body, headers={**signed_headers(body, SECRET), "X-Request-ID": request_id}
    )

    assert status == 202, content
    enquiry = Enquiry.objects.get()
    assert json.loads(content)["reference"] == enquiry.reference
    assert headers["x-request-id"] == request_id
    assert JournalEntry.objects.filter(enquiry_id=enquiry.pk, request_id=request_id).exists()
    # Passed no session, message or CSP middleware: nothing of theirs on the answer.
    assert "set-cookie" not in headers
    assert "content-security-policy" not in headers
    assert headers["x-content-type-options"] == "nosniff"  # SecurityMiddleware's


@pytest.mark.django_db
def test_other_paths_still_pass_the_whole_chain():
    _, headers, _ = call("/healthz", method="GET")

    assert "content-security-policy" in headers
    assert headers["x-frame-options"] == "DENY"


@pytest.mark.django_db
def test_the_short_chain_still_refuses_a_nul_and_an_unknown_host():
    body = fixture_bytes("phone_only.json")
    signed = signed_headers(body, SECRET)

    nul, _, _ = call(URL, body=body, headers={**signed, "X-Odd": "a\x00b"})
    host, _, _ = call(URL, body=body, headers=signed, host="evil.example")

    assert (nul, host) == (400, 400)
    assert not IntakeEvent.objects.exists()


@pytest.fixture
def short_lock_timeout():
    options = connection.settings_dict["OPTIONS"]
    saved = options["options"]
    options["options"] = saved.replace("-c lock_timeout=10000", "-c lock_timeout=200")
    assert options["options"] != saved
    connection.close()
    yield
    options["options"] = saved
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_a_lock_wait_through_the_short_chain_is_503_json(short_lock_timeout):
    """A twin delivery holds the event's identity uncommitted: the wait runs out, the sender
    is told to send again (DatabaseBusyMiddleware, kept in the short chain)."""
    body = fixture_bytes("phone_only.json")
    signed = signed_headers(body, SECRET)
    twin = connections.create_connection("default")
    try:
        twin.set_autocommit(False)
        with twin.cursor() as cursor:
            cursor.execute(
                "INSERT INTO intake_intakeevent (source, event_id, received_at, "
                "last_delivery_at, body, body_sha256, enquiry_id, deliveries) "
                "VALUES ('website', %s, now(), now(), '{}', '', NULL, 1)",
                [signed["webhook-id"]],
            )

        status, headers, content = call(URL, body=body, headers=signed)
    finally:
        twin.rollback()
        twin.close()

    assert status == 503
    assert headers["retry-after"] == "5"
    assert json.loads(content)["error"] == "busy"
    assert not Enquiry.objects.exists()
