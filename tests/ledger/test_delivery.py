"""Delivery reports: Mailgun's tracking webhook (a stored event in Mailgun's own format), signed
as Mailgun signs it, read by django-anymail, applied to the message's operation."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from pathlib import Path

import pytest
from django.test import override_settings
from django.utils import timezone

from ledger import notices
from ledger.delivery import record_report
from ledger.models import Integration, JournalEntry, Operation, OperationState
from tests.ledger.factories import make_operation

FIXTURES = Path(__file__).parent / "fixtures"
SIGNING_KEY = "key-for-tests-only-0123456789abcdef"
BASIC = "mailgun:secret-for-tests"
CONFIGURED = override_settings(
    ANYMAIL={"MAILGUN_WEBHOOK_SIGNING_KEY": SIGNING_KEY, "WEBHOOK_SECRET": BASIC}
)
URL = "/delivery/mailgun/"

pytestmark = pytest.mark.django_db


def sign(signature: dict, key=SIGNING_KEY) -> None:
    signature["signature"] = hmac.new(
        key.encode(),
        f"{signature['timestamp']}{signature['token']}".encode("utf-8", "surrogatepass"),
        hashlib.sha256,
    ).hexdigest()


def mailgun_body(
    message_id, *, event=None, severity="permanent", key=SIGNING_KEY, at=None, stored="failed"
):
    """A stored Mailgun event (``mailgun_<stored>...json``, as Mailgun sends it), about
    ``message_id``, signed now (or at ``at``) with a token of its own."""
    [path] = FIXTURES.glob(f"mailgun_{stored}*.json")
    body = json.loads(path.read_text())
    data = body["event-data"]
    if event is not None:
        data["event"] = event
    if "severity" in data:
        data["severity"] = severity
    data["message"]["headers"]["message-id"] = message_id.strip("<>")  # as Mailgun sends it
    signature = body["signature"]
    signature["timestamp"] = str(int((at or timezone.now()).timestamp()))
    signature["token"] = secrets.token_hex(25)
    sign(signature, key)
    return body


def mailgun_event(message_id, **kwargs):
    return json.dumps(mailgun_body(message_id, **kwargs))


def post(client, body, auth=BASIC):
    headers = {}
    if auth:
        headers["HTTP_AUTHORIZATION"] = "Basic " + base64.b64encode(auth.encode()).decode()
    return client.post(URL, data=body, content_type="application/json", **headers)


@pytest.fixture
def sent(make_enquiry, make_user):
    """A confirmed acknowledgement, as the smtp connector leaves it."""
    owner = make_user("admin", username="notify-owner")
    notify, _ = Integration.objects.get_or_create(
        name=Integration.NOTIFY, defaults={"base_url": "smtp://127.0.0.1:2525", "kind": "smtp"}
    )
    Integration.objects.filter(pk=notify.pk).update(owner=owner)
    enquiry = make_enquiry()

    def make(state="confirmed"):
        op = make_operation(
            enquiry,
            state,
            action="notify.send",
            integration=Integration.objects.get(pk=notify.pk),
            payload={"to": enquiry.email, "template": "enquiry_received"},
        )
        message_id = notices.message_id(op.idempotency_key)
        Operation.objects.filter(pk=op.pk).update(result={"message_id": message_id})
        return op, message_id, owner

    return make


@CONFIGURED
def test_a_bounce_turns_an_accepted_message_into_failed_to_deliver(client, sent):
    op, message_id, _owner = sent()
    response = post(client, mailgun_event(message_id))

    assert response.status_code == 200
    op.refresh_from_db()
    assert op.state == OperationState.FAILED
    assert op.attention == "delivery_failed"
    # Nobody is given it by hand: its queue's owner (the response policy) takes it.
    assert op.owner is None
    assert op.result["delivery"] == "failed"
    row = JournalEntry.objects.filter(subject_id=str(op.pk), action="ledger.operation.bounce").get()
    assert "does not exist" in row.reason and row.evidence["provider"] == "Mailgun"
    from recovery.queue import all_rows

    queued = [r for r in all_rows() if r["q_kind"] == "operation" and str(r["q_key"]) == str(op.pk)]
    assert [r["q_queue"] for r in queued] == ["failed"]


@CONFIGURED
def test_a_temporary_failure_changes_nothing(client, sent):
    op, message_id, _ = sent()
    assert post(client, mailgun_event(message_id, severity="temporary")).status_code == 200
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    assert JournalEntry.objects.filter(
        subject_id=str(op.pk), action="ledger.operation.delivery_report"
    ).exists()


@CONFIGURED
def test_delivered_confirms_a_message_whose_relay_never_replied(client, sent):
    op, message_id, _ = sent("unknown")
    assert post(client, mailgun_event(message_id, event="delivered")).status_code == 200
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    assert op.result["delivery"] == "delivered"


@CONFIGURED
def test_mailguns_delivered_event_as_sent_confirms_a_message_whose_relay_never_replied(
    client, sent
):
    op, message_id, _ = sent("unknown")
    response = post(client, json.dumps(mailgun_body(message_id, stored="delivered")))
    assert response.status_code == 200
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    assert op.result["delivery_report"]["mta_response"] == "OK"


@CONFIGURED
def test_a_report_about_another_message_changes_nothing(client, sent):
    op, _message_id, _ = sent()
    assert post(client, mailgun_event("<not-ours@example.org>")).status_code == 200
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED


@CONFIGURED
@pytest.mark.parametrize(
    "change",
    [
        {"key": "wrong-key"},
        {"auth": "mailgun:wrong"},
        {"auth": ""},
    ],
)
def test_a_report_not_signed_by_the_provider_is_refused(client, sent, change):
    op, message_id, _ = sent()
    body = mailgun_event(message_id, key=change.get("key", SIGNING_KEY))
    response = post(client, body, auth=change.get("auth", BASIC))
    assert response.status_code == 400
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED


@CONFIGURED
@pytest.mark.parametrize("body", ["not json", "{}", '{"signature": {}}', "\ud800"])
def test_a_malformed_report_is_400_never_500(client, body):
    response = post(client, body.encode("utf-8", "surrogatepass"))
    assert response.status_code == 400


@CONFIGURED
def test_a_signed_event_anymail_cannot_read_is_400(client):
    body = json.loads(mailgun_event("<x@y>"))
    del body["event-data"]["event"]
    assert post(client, json.dumps(body)).status_code == 400


def test_off_until_configured(client):
    assert post(client, mailgun_event("<x@y>")).status_code == 404


def test_record_report_without_a_message_id_does_nothing():
    assert record_report(message_id="", event="bounced", provider="x") == "no message id"


@CONFIGURED
def test_get_is_refused_and_changes_nothing(client, sent):
    op, _message_id, _ = sent()
    assert client.get(URL).status_code == 405
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED


def test_a_report_finds_its_message_through_an_index(sent):
    """A report arrives for every message a relay handles: its look-up by Message-ID reads an
    index, in the operation's result and in the attempt's request, not every message sent."""
    from django.db import connection

    from ledger.delivery import sent_with

    op, message_id, _owner = sent()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
    by_result, by_attempt = sent_with(message_id)
    assert "operation_message_id" in by_result.explain()
    assert "attempt_message_id" in by_attempt.explain()
    assert list(by_result.values_list("pk", flat=True)) == [op.pk]
