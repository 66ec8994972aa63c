import json
import time

import pytest
from django.test import Client

from intake import signals
from intake.models import Document, Enquiry, EnquiryState, EventConflict, IntakeEvent, Revision
from ledger.models import JournalEntry
from tests.intake.conftest import (
    NEW_SECRET,
    OTHER_SOURCE_SECRET,
    SECRET,
    URL,
    fixture_bytes,
    load_fixture,
)
from tests.intake.signing import signed_headers

pytestmark = pytest.mark.django_db


@pytest.fixture
def received_signals():
    caught = []

    def catch(signal_name):
        def receiver(sender, **kwargs):
            caught.append((signal_name, kwargs))

        return receiver

    receivers = {
        signals.enquiry_received: catch("received"),
        signals.event_redelivered: catch("redelivered"),
        signals.enquiry_action: catch("action"),
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver, weak=False)
    yield caught
    for signal, receiver in receivers.items():
        signal.disconnect(receiver)


def stored_counts():
    return (
        IntakeEvent.objects.count(),
        Enquiry.objects.count(),
        Revision.objects.count(),
        Document.objects.count(),
    )


def test_new_event_is_stored_and_answered_202(post_event, received_signals):
    body = fixture_bytes("website_enquiry.json")
    response = post_event(body, msg_id="msg_new_1")

    assert response.status_code == 202
    answer = response.json()
    assert answer["status"] == "received"
    assert answer["duplicate"] is False
    enquiry = Enquiry.objects.get(reference=answer["reference"])
    assert enquiry.state == EnquiryState.VALIDATED
    assert enquiry.source == "website"
    assert enquiry.message == "My bin was not emptied this week."
    assert enquiry.email == "ada@example.org"  # normalised for the advisory match
    assert enquiry.service_hint == "waste"
    assert enquiry.category is None  # a hint is not a category
    assert enquiry.workflow_version
    event = IntakeEvent.objects.get()
    assert (event.source, event.event_id, event.enquiry_id) == ("website", "msg_new_1", enquiry.pk)
    assert event.body.encode() == body
    assert len(event.body_sha256) == 64
    assert event.deliveries == 1
    revision = enquiry.revision
    assert revision.number == 1
    assert revision.origin == "intake"
    assert revision.fields == {
        "name": "Ada Lovelace",
        "email": "ada@example.org",
        "phone": "+44 20 7946 0000",
        "subject": "Missed collection",
        "message": "My bin was not emptied this week.",
        "service_hint": "waste",
        "category": None,
    }
    assert sorted(Document.objects.values_list("document_id", "version", "status")) == [
        ("doc-17", "2", "pending"),
        ("doc-18", "1", "pending"),
    ]
    journal = JournalEntry.objects.get(subject_type="intake.enquiry", enquiry=enquiry)
    assert (journal.from_state, journal.to_state, journal.actor) == (
        "received",
        "validated",
        "system:intake",
    )
    assert journal.evidence["event"] == "website/msg_new_1"
    assert [name for name, _ in received_signals] == ["received"]
    assert received_signals[0][1]["enquiry"] == enquiry


def test_repeat_answers_the_stored_result_with_200(post_event, received_signals):
    body = fixture_bytes("phone_only.json")
    first = post_event(body, msg_id="msg_repeat")
    # A real retry is signed again, later, by the other secret of a rotation: still the same event.
    second = post_event(body, msg_id="msg_repeat", secret=NEW_SECRET, timestamp=time.time() + 5)

    assert first.status_code == 202
    assert second.status_code == 200
    assert second.json() == {**first.json(), "duplicate": True}
    assert stored_counts() == (1, 1, 1, 0)
    assert IntakeEvent.objects.get().deliveries == 2
    assert [name for name, _ in received_signals] == ["received", "redelivered"]


def test_same_id_other_body_is_a_recorded_conflict(post_event, received_signals):
    original = fixture_bytes("phone_only.json")
    post_event(original, msg_id="msg_conflict")
    other = json.dumps({**load_fixture("phone_only.json"), "message": "Changed"}).encode()

    response = post_event(other, msg_id="msg_conflict")

    assert response.status_code == 409
    event = IntakeEvent.objects.get()
    assert event.body.encode() == original
    assert Enquiry.objects.get().message == "There is a leak under the kitchen sink."
    conflict = EventConflict.objects.get()
    assert conflict.body.encode() == other
    assert conflict.event == event
    assert response.json()["reference"] == event.enquiry.reference
    assert received_signals[-1][0] == "action"
    assert received_signals[-1][1]["action"] == "intake.event.conflict"


def test_conflict_wins_over_validation(post_event):
    post_event(fixture_bytes("phone_only.json"), msg_id="msg_conflict_invalid")
    response = post_event(fixture_bytes("no_consent.json"), msg_id="msg_conflict_invalid")
    assert response.status_code == 409
    # One enquiry (the first delivery's) and the second body kept as a conflict, not validated.
    assert Enquiry.objects.count() == 1
    conflict = EventConflict.objects.get()
    assert conflict.body.encode() == fixture_bytes("no_consent.json")
    assert conflict.event == IntakeEvent.objects.get()


def test_same_id_from_another_source_is_another_event(post_event):
    body = fixture_bytes("phone_only.json")
    assert post_event(body, msg_id="msg_shared").status_code == 202
    other = post_event(
        body, msg_id="msg_shared", url="/intake/events/partner/", secret=OTHER_SOURCE_SECRET
    )
    assert other.status_code == 202
    assert stored_counts()[:2] == (2, 2)


def test_second_legitimate_request_from_same_person_is_new(post_event):
    body = fixture_bytes("website_enquiry.json")
    first = post_event(body).json()["reference"]
    second = post_event(body).json()["reference"]  # a new webhook-id: a new event
    assert first != second
    assert Enquiry.objects.count() == 2


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (
            "no_contact_empty_message.json",
            {
                "email": ["Give an email address or a phone number so we can reply."],
                "message": ["Tell us what the enquiry is about (the message is empty)."],
            },
        ),
        (
            "no_consent.json",
            {
                "consent": [
                    "Set consent to true once the person has agreed that we store and use their "
                    "enquiry; without it we cannot accept the enquiry."
                ]
            },
        ),
    ],
)
def test_invalid_fields_422_with_actionable_messages(post_event, fixture, expected):
    response = post_event(fixture_bytes(fixture))
    assert response.status_code == 422
    assert response.json() == {"errors": expected}
    assert stored_counts() == (0, 0, 0, 0)
    assert JournalEntry.objects.count() == 0


def test_every_bad_field_is_named(post_event):
    response = post_event(fixture_bytes("bad_fields.json"))
    assert response.status_code == 422
    errors = response.json()["errors"]
    assert set(errors) == {"name", "email", "phone", "documents", "consent", "emial"}
    assert errors["name"] == ["Send the name as text (a JSON string)."]
    assert "not a valid address" in errors["email"][0]
    assert errors["consent"] == ["Send consent as true or false (a JSON boolean)."]
    assert len(errors["documents"]) == 2
    assert "Unknown field" in errors["emial"][0]
    assert stored_counts() == (0, 0, 0, 0)


def test_too_long_fields_say_the_limit(post_event):
    body = json.dumps(
        {"email": "a@example.org", "message": "x" * 10_001, "subject": "s" * 201, "consent": True}
    ).encode()
    errors = post_event(body).json()["errors"]
    assert errors["message"] == ["Shorten the message to at most 10000 characters (it has 10001)."]
    assert errors["subject"] == ["Shorten the subject to at most 200 characters (it has 201)."]


@pytest.mark.parametrize(
    "body",
    [b"[1, 2]", b'"text"', b"null", b"3"],
    ids=["array", "string", "null", "number"],
)
def test_json_that_is_not_an_object_is_422(post_event, body):
    response = post_event(body)
    assert response.status_code == 422
    assert "body" in response.json()["errors"]


def test_not_json_is_415(post_event):
    assert post_event(b"name=Ada&message=hi").status_code == 415
    assert post_event(b"\xff\xfe\x00").status_code == 415
    body = fixture_bytes("phone_only.json")
    assert post_event(body, content_type="text/plain").status_code == 415
    assert stored_counts() == (0, 0, 0, 0)


def test_too_large_is_413_before_the_body_is_read(client, settings):
    settings.INTAKE_MAX_BODY_BYTES = 1024
    body = json.dumps({"email": "a@example.org", "message": "x" * 2000, "consent": True}).encode()
    response = client.generic(
        "POST", URL, body, content_type="application/json", headers=signed_headers(body, SECRET)
    )
    assert response.status_code == 413
    assert stored_counts() == (0, 0, 0, 0)


def test_bad_content_length_is_400(client):
    response = client.generic(
        "POST", URL, b"{}", content_type="application/json", CONTENT_LENGTH="ten"
    )
    assert response.status_code == 400
    assert stored_counts() == (0, 0, 0, 0)


@pytest.mark.parametrize(
    "change",
    ["tampered", "wrong_secret", "stale", "future", "no_headers", "no_signature", "unknown_source"],
)
def test_unauthentic_deliveries_are_401(client, change):
    body = fixture_bytes("phone_only.json")
    url, secret, timestamp = URL, SECRET, None
    if change == "wrong_secret":
        secret = OTHER_SOURCE_SECRET
    # Well outside the 300 s tolerance: the header carries whole seconds and the server reads
    # its clock later, so +301 could land back inside on a busy machine (the exact boundary is
    # tested with an injected clock in test_signing.py).
    elif change == "stale":
        timestamp = time.time() - 330
    elif change == "future":
        timestamp = time.time() + 330
    elif change == "unknown_source":
        url = "/intake/events/nobody/"
    headers = signed_headers(body, secret, timestamp=timestamp)
    if change == "tampered":
        body = body.replace(b"leak", b"lake")
    elif change == "no_headers":
        headers = {}
    elif change == "no_signature":
        del headers["webhook-signature"]
    response = client.generic("POST", url, body, content_type="application/json", headers=headers)
    assert response.status_code == 401
    assert "error" in response.json()
    assert stored_counts() == (0, 0, 0, 0)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_only_post(client, method):
    assert client.generic(method, URL).status_code == 405
    assert stored_counts() == (0, 0, 0, 0)


def test_endpoint_needs_no_login_and_no_csrf_token(post_event, settings):
    csrf_client = Client(enforce_csrf_checks=True)
    body = fixture_bytes("phone_only.json")
    response = csrf_client.generic(
        "POST", URL, body, content_type="application/json", headers=signed_headers(body, SECRET)
    )
    assert response.status_code == 202
    assert stored_counts()[:2] == (1, 1)
    assert Enquiry.objects.get().reference == response.json()["reference"]


def test_a_failing_receiver_leaves_nothing_half_stored(post_event):
    def explode(sender, **kwargs):
        raise RuntimeError("the ledger is down")

    signals.enquiry_received.connect(explode, weak=False)
    try:
        with pytest.raises(RuntimeError):
            post_event(fixture_bytes("phone_only.json"))
    finally:
        signals.enquiry_received.disconnect(explode)
    assert stored_counts() == (0, 0, 0, 0)
    assert JournalEntry.objects.count() == 0
