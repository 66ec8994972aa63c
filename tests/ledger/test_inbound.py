"""Replies by e-mail through Mailgun's inbound route (/inbound/mailgun/), from stored posts in
Mailgun's two forms (raw MIME and fully parsed): threaded to the enquiry by our own Message-ID
or our signed reply address, else waiting with an owner; signed, in time, and taken once."""

import hashlib
import hmac
import json
import secrets
import time
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intake import residentlink
from intake.models import Enquiry, EnquiryState
from intake.residentmodels import AnswerState, ResidentAnswer, ResidentFile
from ledger import notices
from ledger.models import JournalEntry, Operation
from tests.intake.factories import EnquiryFactory

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parent / "fixtures"
KEY = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
URL = "/inbound/mailgun/"
DOMAIN = "reply.council.example"


@pytest.fixture(autouse=True)
def inbound_configured(settings):
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": KEY, "WEBHOOK_SECRET": ""}
    settings.RESIDENT_REPLY_DOMAIN = DOMAIN


def signed(fields: dict, *, key=KEY, timestamp=None, token=None) -> dict:
    timestamp = str(int(time.time()) if timestamp is None else timestamp)
    token = token or secrets.token_hex(25)
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {**fields, "timestamp": timestamp, "token": token, "signature": signature}


def fill(text: str, **values) -> str:
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    return text


def mime_post(*, in_reply_to="<nothing-of-ours@example.net>", to="council@example.org", ref=""):
    raw = (FIXTURES / "mailgun_inbound_reply.mime.eml").read_text()
    body = fill(raw, IN_REPLY_TO=in_reply_to, TO=to, REFERENCE=ref).replace("\n", "\r\n")
    return {"recipient": to, "sender": "resident@example.org", "body-mime": body}


def parsed_post(*, recipient):
    fields = json.loads((FIXTURES / "mailgun_inbound_parsed.json").read_text())
    fields.pop("_comment")
    return {k: fill(v, RECIPIENT=recipient) for k, v in fields.items()}


@pytest.fixture
def asked():
    """An enquiry whose "we need more information" message was sent (its Message-ID kept)."""
    enquiry = EnquiryFactory(state="needs_information", email="resident@example.org")
    op = Operation.objects.get(enquiry=enquiry, payload__template=notices.NEEDS_INFORMATION)
    message_id = notices.message_id(op.idempotency_key)
    Operation.objects.filter(pk=op.pk).update(result={"message_id": message_id})
    enquiry.sent_message_id = message_id
    return enquiry


def test_a_reply_threaded_by_in_reply_to_is_a_revision_of_its_enquiry(client, asked):
    enquiries = Enquiry.objects.count()
    post = signed(mime_post(in_reply_to=asked.sent_message_id, ref=asked.reference))
    response = client.post(URL, post)
    assert response.status_code == 200
    asked.refresh_from_db()
    assert asked.state == EnquiryState.READY_FOR_REVIEW
    assert asked.current_revision == 2
    assert Enquiry.objects.count() == enquiries
    message = asked.revision.fields["message"]
    assert "outside number 14" in message
    assert "wrote:" not in message and "Thank you for your enquiry" not in message  # quote cut
    answer = ResidentAnswer.objects.get()
    assert answer.state == AnswerState.ATTACHED and answer.enquiry == asked
    assert answer.sender == "resident@example.org"
    assert answer.in_reply_to == asked.sent_message_id
    # The PDF is kept; the program is not, and the answer says so.
    assert list(answer.files.values_list("name", flat=True)) == ["bin-photo.pdf"]
    assert "invoice.exe (not a PDF, JPEG or PNG file)" in answer.text
    entry = JournalEntry.objects.get(enquiry_id=asked.pk, action="intake.enquiry.resident_answered")
    assert entry.actor == "resident:email"


def test_a_reply_to_our_signed_address_is_threaded_by_it(client, asked):
    address = residentlink.reply_address(asked)
    assert address.endswith("@" + DOMAIN) and len(address.split("@")[0]) <= 64
    response = client.post(URL, signed(parsed_post(recipient=address)))
    assert response.status_code == 200
    answer = ResidentAnswer.objects.get()
    assert answer.enquiry == asked and answer.state == AnswerState.ATTACHED
    # Mailgun's stripped-text: the reply without the quoted message.
    assert answer.text == "Here is the house number: 14."
    asked.refresh_from_db()
    assert asked.current_revision == 2 and asked.state == EnquiryState.READY_FOR_REVIEW


def test_an_altered_reply_address_is_no_match_and_the_reply_waits(client, asked):
    address = residentlink.reply_address(asked)
    local, domain = address.split("@")
    altered = local[:-1] + ("0" if local[-1] != "0" else "1") + "@" + domain
    client.post(URL, signed(parsed_post(recipient=altered)))
    answer = ResidentAnswer.objects.get()
    assert answer.state == AnswerState.UNMATCHED and answer.enquiry is None
    asked.refresh_from_db()
    assert asked.current_revision == 1 and asked.state == EnquiryState.NEEDS_INFORMATION


def test_an_unmatched_reply_waits_never_dropped_never_guessed(client, asked):
    enquiries = Enquiry.objects.count()
    # Quotes the reference in its subject and comes from the resident's address: still no
    # guess. Only what our own messages carry threads a reply.
    response = client.post(URL, signed(mime_post(ref=asked.reference)))
    assert response.status_code == 200
    answer = ResidentAnswer.objects.get()
    assert answer.state == AnswerState.UNMATCHED and answer.enquiry is None
    assert "outside number 14" in answer.text
    assert ResidentFile.objects.filter(answer=answer).count() == 1
    assert Enquiry.objects.count() == enquiries
    asked.refresh_from_db()
    assert asked.current_revision == 1
    entry = JournalEntry.objects.get(subject_id=str(answer.pk))
    assert entry.action == "intake.answer.unmatched" and entry.actor == "resident:email"


def test_a_reply_to_an_enquiry_already_passed_on_waits_for_a_person(client):
    enquiry = EnquiryFactory(state="approved")
    client.post(URL, signed(parsed_post(recipient=residentlink.reply_address(enquiry))))
    answer = ResidentAnswer.objects.get()
    assert answer.state == AnswerState.NOT_ATTACHED and answer.enquiry == enquiry
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.APPROVED and enquiry.current_revision == 1


def test_a_replayed_post_is_taken_once(client, asked):
    post = signed(mime_post(in_reply_to=asked.sent_message_id))
    assert [client.post(URL, post).status_code for _ in range(3)] == [200, 200, 200]
    assert ResidentAnswer.objects.count() == 1
    asked.refresh_from_db()
    assert asked.current_revision == 2


@pytest.mark.parametrize(
    "change",
    [
        {"signature": "0" * 64},
        {"signature": "not hex"},
        {"token": "ümlaut"},
        {"timestamp": "²"},
        {"timestamp": "1"},  # far outside the window
    ],
)
def test_a_post_without_a_good_signature_in_its_window_is_refused_and_nothing_kept(
    client, asked, change
):
    post = {**signed(mime_post(in_reply_to=asked.sent_message_id)), **change}
    if "timestamp" in change and change["timestamp"].isascii():
        post = signed(mime_post(in_reply_to=asked.sent_message_id), timestamp=change["timestamp"])
    response = client.post(URL, post)
    assert 400 <= response.status_code < 500
    assert ResidentAnswer.objects.count() == 0


def test_a_post_signed_with_another_key_is_refused(client, asked):
    post = signed(mime_post(in_reply_to=asked.sent_message_id), key="key-someone-else")
    assert client.post(URL, post).status_code == 400
    assert ResidentAnswer.objects.count() == 0


def test_the_endpoint_is_off_until_its_key_is_set(client, settings):
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": "", "WEBHOOK_SECRET": ""}
    assert client.post(URL, signed(mime_post(), key="")).status_code == 404


def test_an_unreadable_signed_post_is_kept_for_a_person(client):
    post = signed({"body-plain": "hello", "attachments": "[]", "recipient": "x@example.org"})
    assert client.post(URL, post).status_code == 200
    answer = ResidentAnswer.objects.get()
    assert answer.state == AnswerState.UNMATCHED
    assert "hello" in answer.text


def test_attachments_by_the_parsed_form_are_kept_within_the_limits(client, asked):
    fields = parsed_post(recipient=residentlink.reply_address(asked))
    fields["attachment-count"] = "1"
    fields["attachment-1"] = SimpleUploadedFile(
        "scan.png", b"\x89PNG\r\n\x1a\n" + b"\x01" * 32, "image/png"
    )
    assert client.post(URL, signed(fields)).status_code == 200
    answer = ResidentAnswer.objects.get()
    assert list(answer.files.values_list("name", "content_type")) == [("scan.png", "image/png")]


def test_our_messages_carry_the_signed_reply_address_that_threads_the_answer(asked):
    op = Operation.objects.get(enquiry=asked, payload__template=notices.NEEDS_INFORMATION)
    email = notices.build(op)
    assert email.extra_headers["Reply-To"] == residentlink.reply_address(asked)
    assert residentlink.enquiry_for_reply_address(email.extra_headers["Reply-To"]) == asked
    assert "reply to this message" in email.body and "not read" not in email.body
    # The page's link is in the message too.
    assert (
        "/r/" in email.body
        and residentlink.read(email.body.split("/r/", 1)[1].split("/", 1)[0]).enquiry == asked
    )


def test_a_nul_in_a_signed_reply_is_kept_readable_never_refused(client, asked):
    fields = parsed_post(recipient=residentlink.reply_address(asked))
    fields["stripped-text"] = "number 14\x00 and the gate"
    assert client.post(URL, signed(fields)).status_code == 200
    answer = ResidentAnswer.objects.get()
    assert answer.state == AnswerState.ATTACHED
    assert answer.text == "number 14\ufffd and the gate"


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.dictionaries(
        st.sampled_from(
            [
                "body-plain",
                "stripped-text",
                "subject",
                "from",
                "recipient",
                "sender",
                "message-headers",
                "attachment-count",
                "body-mime",
                "In-Reply-To",
            ]
        ),
        st.text(max_size=200),
        max_size=6,
    )
)
def test_hostile_signed_posts_never_answer_5xx_and_are_kept_once(client, values):
    before = ResidentAnswer.objects.count()
    post = signed({k: v.encode("utf-8", "replace").decode() for k, v in values.items()})
    response = client.post(URL, post)
    assert response.status_code < 500
    assert ResidentAnswer.objects.count() == before + (1 if response.status_code == 200 else 0)
