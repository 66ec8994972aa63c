"""The delivery-report endpoint (ledger.webhooks) on hostile requests: every malformed body a
clear 4xx with its reason, never a 5xx; the signature before anything else is read; a window on
the signature's timestamp; each event taken once; a report's NUL or lone surrogate recorded."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.models import JournalEntry, OperationState, ProviderEvent
from tests.ledger.test_delivery import (
    CONFIGURED,
    mailgun_body,
    mailgun_event,
    post,
    sent,  # noqa: F401  (a fixture)
    sign,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def configured(settings):
    settings.ANYMAIL = CONFIGURED.options["ANYMAIL"]


def signed(**signature) -> dict:
    """A body whose signature block holds ``signature`` (re-signed), about no message."""
    body = mailgun_body("<nobody@example.org>")
    body["signature"].update(signature)
    sign(body["signature"])
    return body


def block(timestamp, token, signature) -> str:
    return json.dumps(
        {"signature": {"timestamp": timestamp, "token": token, "signature": signature}}
    )


def deep(n):
    return "[" * n + "]" * n


# Each once answered 500 with the right basic auth, before the signature was checked.
MALFORMED = {
    "a list": "[]",
    "a string": '"x"',
    "a number": "1e400",
    "null": "null",
    "the signature a list": '{"signature": []}',
    "the signature a string": '{"signature": "abc"}',
    "the signature's fields numbers": block(1, 2, 3),
    "the signature's fields objects": block({}, [], {}),
    "non-ASCII token": block("1", "\u00e9", "x"),
    "a lone surrogate token": block("1", "\ud800", "x"),
    "nested 10,000 deep": '{"signature": ' + deep(10_000) + "}",
    "an integer of 5,000 digits": '{"signature": {"timestamp": ' + "9" * 5000 + "}}",
    "the signature twice": '{"signature": {}, "signature": {}}',
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_body_is_a_400_with_its_reason(client, body):
    response = post(client, body.encode())
    assert response.status_code == 400
    assert response.json()["error"]
    assert ProviderEvent.objects.count() == 0


def test_a_body_that_is_not_utf8_is_a_400(client):
    response = post(client, b'{"signature": "\xff"}')
    assert response.status_code == 400
    assert response.json() == {"error": "The body is not UTF-8."}


def test_mailguns_legacy_form_webhook_is_refused_with_its_reason(client):
    response = client.post(
        "/delivery/mailgun/",
        {"timestamp": "1", "token": "x", "signature": "y"},
        HTTP_AUTHORIZATION="Basic bWFpbGd1bjpzZWNyZXQtZm9yLXRlc3Rz",
    )
    assert response.status_code == 400
    assert "application/json" in response.json()["error"]


@pytest.mark.parametrize(
    "timestamp",
    ["1780000000\x00", "nan", "1e10", "-5", "99999999999999999999", "", " 1780000000", "\u00b2"],
)
def test_a_signed_event_with_an_odd_timestamp_is_a_400(client, timestamp):
    response = post(client, json.dumps(signed(timestamp=timestamp)))
    assert response.status_code == 400
    assert "timestamp" in response.json()["error"]


@pytest.mark.parametrize("event_timestamp", ["nan", 1e300, "x", [1], None, -1e20])
def test_a_signed_event_anymail_cannot_read_is_a_400(client, event_timestamp):
    body = signed()
    body["event-data"]["timestamp"] = event_timestamp
    response = post(client, json.dumps(body))
    assert response.status_code == 400
    assert "cannot be read" in response.json()["error"]
    assert ProviderEvent.objects.count() == 0


def test_the_signature_is_checked_before_the_event_is_read(client):
    body = signed()
    body["event-data"] = []  # unreadable, and not signed by the right key
    body["signature"]["signature"] = "0" * 64
    response = post(client, json.dumps(body))
    assert response.json() == {"error": "The signature does not match."}


def test_an_event_signed_400_days_ago_is_refused_every_time(client, sent):  # noqa: F811
    op, message_id, _ = sent()
    body = mailgun_event(message_id, at=timezone.now() - timedelta(days=400))
    for _ in range(2):
        response = post(client, body)
        assert response.status_code == 400
        assert re.match(r"The event was signed 3456000\d s ago", response.json()["error"])
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    assert ProviderEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("offset", "taken"),
    [
        (timedelta(minutes=-14), True),
        (timedelta(minutes=14), True),
        (timedelta(minutes=-16), False),
        (timedelta(minutes=16), False),
    ],
)
def test_the_window_is_fifteen_minutes_either_side(client, sent, offset, taken):  # noqa: F811
    op, message_id, _ = sent()
    response = post(client, mailgun_event(message_id, at=timezone.now() + offset))
    assert response.status_code == (200 if taken else 400)
    op.refresh_from_db()
    assert (op.state == OperationState.FAILED) is taken


def test_a_replayed_event_answers_200_and_acts_once(client, sent):  # noqa: F811
    op, message_id, _ = sent()
    body = mailgun_event(message_id, event="failed")
    assert post(client, body).json() == {"status": "taken"}
    bounced = JournalEntry.objects.filter(subject_id=str(op.pk)).count()
    for _ in range(3):
        response = post(client, body)
        assert response.status_code == 200
        assert response.json() == {"status": "already taken"}
    assert JournalEntry.objects.filter(subject_id=str(op.pk)).count() == bounced
    assert ProviderEvent.objects.filter(provider="Mailgun").count() == 1


def test_a_delivered_report_replayed_after_a_bounce_changes_nothing(client, sent):  # noqa: F811
    """A replay cannot carry an old token past take_once, even with a new event body (Mailgun
    signs only timestamp and token)."""
    op, message_id, _ = sent("unknown")
    body = mailgun_body(message_id, event="failed")
    assert post(client, json.dumps(body)).status_code == 200
    body["event-data"]["event"] = "delivered"
    assert post(client, json.dumps(body)).json() == {"status": "already taken"}
    op.refresh_from_db()
    assert op.state == OperationState.FAILED


def test_tokens_older_than_two_windows_are_pruned(client, sent):  # noqa: F811
    _op, message_id, _ = sent()
    ProviderEvent.objects.create(
        provider="Mailgun", event_id="old", signed_at=timezone.now() - timedelta(hours=1)
    )
    assert post(client, mailgun_event(message_id)).status_code == 200
    assert list(ProviderEvent.objects.values_list("event_id", flat=True)) != ["old"]
    assert not ProviderEvent.objects.filter(event_id="old").exists()


@pytest.mark.parametrize(
    "said", ["550 no such user\x00here", "550 no such user \ud800 here", "\x00" * 600]
)
def test_a_bounce_with_a_nul_or_a_lone_surrogate_is_recorded(client, sent, said):  # noqa: F811
    op, message_id, _ = sent()
    body = mailgun_body(message_id)
    body["event-data"]["delivery-status"]["message"] = said
    response = post(client, json.dumps(body))
    assert response.status_code == 200
    op.refresh_from_db()
    assert op.state == OperationState.FAILED
    row = JournalEntry.objects.get(subject_id=str(op.pk), action="ledger.operation.bounce")
    assert "\ufffd" in row.reason and "\x00" not in row.evidence["mta_response"]


@pytest.mark.parametrize("message_id", ["<a\x00b@example.org>", "<\ud800@example.org>", 12, {}])
def test_a_signed_report_with_an_odd_message_id_is_answered_without_a_500(client, message_id):
    body = signed()
    body["event-data"]["message"]["headers"]["message-id"] = message_id
    assert post(client, json.dumps(body)).status_code in (200, 400)


# --- no body makes it 5xx ---------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\x00\ud800")),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
FIELD = JSON | st.sampled_from(["", "1780000000", "\x00", "nan", "9" * 40])


@st.composite
def bodies(draw):
    kind = draw(st.sampled_from(["raw", "json", "signature", "signed"]))
    if kind == "raw":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(JSON)).encode("utf-8", "surrogatepass")
    if kind == "signature":
        block = {k: draw(FIELD) for k in ("timestamp", "token", "signature")}
        return json.dumps({"signature": block, "event-data": draw(JSON)}).encode(
            "utf-8", "surrogatepass"
        )
    body = signed()  # rightly signed, now: only the event is hostile
    body["event-data"] = draw(st.dictionaries(st.sampled_from(list(body["event-data"])), JSON))
    return json.dumps(body).encode("utf-8", "surrogatepass")


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies())
def test_no_body_makes_the_webhook_answer_5xx(client, body):
    response = post(client, body)
    assert response.status_code in (200, 400, 413)
    assert response["Content-Type"] == "application/json"
