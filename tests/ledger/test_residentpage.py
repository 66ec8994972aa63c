"""The resident page (/r/<token>/): the answer is a revision of the same enquiry by the
resident, back to review; uploads within the limits; an expired link offers a new one through
the ledger, never showing the address; hostile input never answers 5xx."""

import re
from datetime import timedelta
from urllib.parse import quote_from_bytes

import pytest
import time_machine
from django.core.files.uploadedfile import SimpleUploadedFile
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intake import residentlink
from intake.models import Enquiry, EnquiryState, Revision
from intake.residentmodels import ResidentAnswer, ResidentFile
from ledger import notices
from ledger.models import JournalEntry, Operation
from tests.intake.factories import EnquiryFactory

pytestmark = pytest.mark.django_db

PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture
def asked():
    return EnquiryFactory(state="needs_information", email="resident@example.org")


def page_of(enquiry, **kwargs):
    return f"/r/{residentlink.token_for(enquiry, **kwargs)}/"


def test_the_page_shows_the_state_in_the_residents_words_and_never_the_journal_reason(
    client, asked
):
    response = client.get(page_of(asked))
    assert response.status_code == 200
    text = response.content.decode()
    assert "We need more information from you" in text
    assert asked.reference in text
    # The reviewer's reason is for the journal: "factory: request_information".
    assert "factory" not in text
    assert "resident@example.org" not in text


def test_the_message_links_the_page_and_says_replies_are_not_read_without_a_reply_domain(asked):
    op = Operation.objects.get(enquiry=asked, payload__template=notices.NEEDS_INFORMATION)
    body = notices.build(op).body
    token = body.split("/r/", 1)[1].split("/", 1)[0]
    assert residentlink.read(token).enquiry == asked
    assert "replies to it are not read" in body and "reply to this message" not in body


def test_the_page_shows_the_words_written_for_the_resident_when_the_message_kept_them(
    client, asked
):
    op = Operation.objects.get(enquiry=asked, payload__template=notices.NEEDS_INFORMATION)
    op.payload = {**op.payload, "message_to_resident": "Please send a photo of the bin."}
    op.save(update_fields=["payload"])
    assert "Please send a photo of the bin." in client.get(page_of(asked)).content.decode()


def test_an_answer_is_a_revision_by_the_resident_back_to_review_and_no_second_enquiry(
    client, asked
):
    enquiries = Enquiry.objects.count()
    response = client.post(page_of(asked), {"text": "It is on Mill Lane, since Monday."})
    assert response.status_code == 302
    asked.refresh_from_db()
    assert asked.state == EnquiryState.READY_FOR_REVIEW
    assert asked.current_revision == 2
    assert Revision.objects.filter(enquiry=asked).count() == 2
    revision = asked.revision
    assert revision.origin == "resident"
    assert "It is on Mill Lane, since Monday." in revision.fields["message"]
    assert Enquiry.objects.count() == enquiries
    actions = dict(JournalEntry.objects.filter(enquiry_id=asked.pk).values_list("action", "actor"))
    assert actions["intake.enquiry.information_received"] == "resident:page"
    assert actions["intake.enquiry.resident_answered"] == "resident:page"
    # The resident's words stay out of the journal (it outlives personal data).
    assert not JournalEntry.objects.filter(kept_reason__contains="Mill Lane").exists()
    thanks = client.get(response["Location"])
    assert "Thank you" in thanks.content.decode()


def submission_of(client, enquiry) -> str:
    """The one-time key the page's form carries, as a browser reads it."""
    page = client.get(page_of(enquiry)).content.decode()
    return re.search(r'name="submission" value="([0-9a-f]{32})"', page).group(1)


def test_the_same_form_sent_twice_is_taken_once(client, asked):
    form = {"text": "It is on Mill Lane.", "submission": submission_of(client, asked)}
    first = client.post(page_of(asked), form)
    second = client.post(page_of(asked), form)
    assert first.status_code == second.status_code == 302
    assert second["Location"] == first["Location"]
    assert Revision.objects.filter(enquiry=asked, origin="resident").count() == 1
    assert ResidentAnswer.objects.filter(enquiry=asked).count() == 1
    # A fresh form (the page read again) is a new answer.
    again = {"text": "And a photo later.", "submission": submission_of(client, asked)}
    assert client.post(page_of(asked), again).status_code == 302
    assert Revision.objects.filter(enquiry=asked, origin="resident").count() == 2


@pytest.mark.parametrize(
    "value", [b"%ED%A0%80", b"x" * 5000, b"A" * 32, b"%C4%B0" * 16, b"page%3Aabc"]
)
def test_a_malformed_form_key_is_ignored_never_5xx(client, asked, value):
    response = client.post(
        page_of(asked),
        b"text=Mill+Lane&submission=" + value,
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 302
    assert ResidentAnswer.objects.get(enquiry=asked).provider_token is None


def test_an_upload_is_kept_with_the_answer_and_named_in_the_revision(client, asked):
    response = client.post(
        page_of(asked),
        {
            "text": "",
            "files": [
                SimpleUploadedFile("bin.pdf", PDF, "application/pdf"),
                SimpleUploadedFile("../../photo.png", PNG, "image/png"),
            ],
        },
    )
    assert response.status_code == 302
    answer = ResidentAnswer.objects.get(enquiry=asked)
    assert sorted(answer.files.values_list("name", "content_type")) == [
        ("bin.pdf", "application/pdf"),
        ("photo.png", "image/png"),
    ]
    assert bytes(answer.files.get(name="bin.pdf").data) == PDF
    asked.refresh_from_db()
    assert asked.current_revision == 2
    assert "bin.pdf" in asked.revision.fields["message"]


@pytest.mark.parametrize(
    "files, words",
    [
        ([("notes.txt", b"just text")], "not a PDF, JPEG or PNG"),
        ([("fake.pdf", b"MZ\x90\x00 an exe")], "not a PDF, JPEG or PNG"),
        ([("empty.pdf", b"")], "is empty"),
        ([(f"f{i}.pdf", PDF) for i in range(4)], "at most 3 documents"),
        ([("big.pdf", PDF + b"0" * 2048)], "larger than 1 KB"),
    ],
)
def test_an_upload_outside_the_limits_is_refused_and_nothing_is_stored(
    client, asked, settings, files, words
):
    settings.RESIDENT_UPLOAD_MAX_BYTES = 1024 if words.startswith("larger") else 1024 * 1024
    uploads = [SimpleUploadedFile(name, data) for name, data in files]
    response = client.post(page_of(asked), {"text": "see attached", "files": uploads})
    assert response.status_code == 422
    assert words in response.content.decode()
    assert "see attached" in response.content.decode()  # what was typed is kept
    assert ResidentAnswer.objects.count() == ResidentFile.objects.count() == 0
    asked.refresh_from_db()
    assert asked.current_revision == 1 and asked.state == EnquiryState.NEEDS_INFORMATION


def test_an_empty_answer_is_refused(client, asked):
    response = client.post(page_of(asked), {"text": " \n "})
    assert response.status_code == 422
    assert ResidentAnswer.objects.count() == 0


def test_an_expired_link_says_so_and_sends_a_new_one_to_the_address_on_file(client, asked):
    issued = timezone.now() - timedelta(days=31)
    url = page_of(asked, now=issued)
    response = client.get(url)
    assert response.status_code == 410
    text = response.content.decode()
    assert "This link has expired" in text
    assert "resident@example.org" not in text
    # An expired link takes no answer.
    client.post(url, {"text": "late"})
    assert ResidentAnswer.objects.count() == 0

    before = Operation.objects.filter(payload__template=notices.RESIDENT_LINK).count()
    response = client.post(url + "new-link/")
    assert response.status_code == 200
    assert "A new link is on its way" in response.content.decode()
    assert "resident@example.org" not in response.content.decode()
    [op] = Operation.objects.filter(payload__template=notices.RESIDENT_LINK)
    assert before == 0
    assert op.payload["to"] == "resident@example.org"
    assert op.state == "approved"
    fresh = op.payload["answer_link"]
    assert residentlink.read(fresh.rsplit("/r/", 1)[1].strip("/")).enquiry == asked
    asked_by = JournalEntry.objects.get(
        enquiry_id=asked.pk, action="intake.enquiry.new_link_requested"
    )
    assert asked_by.actor == "resident:page"


def test_new_links_are_rate_limited_per_enquiry(client, asked):
    url = page_of(asked, now=timezone.now() - timedelta(days=40)) + "new-link/"
    answers = [client.post(url).status_code for _ in range(5)]
    assert answers == [200, 200, 200, 429, 429]
    assert Operation.objects.filter(payload__template=notices.RESIDENT_LINK).count() == 3


def test_answers_are_rate_limited_per_link(client, asked, settings):
    settings.RESIDENT_ANSWERS_PER_HOUR = 2
    asked_again = EnquiryFactory(state="ready_for_review")
    url = page_of(asked_again)
    codes = [client.post(url, {"text": f"more {i}"}).status_code for i in range(4)]
    assert codes == [302, 302, 429, 429]
    assert ResidentAnswer.objects.filter(enquiry=asked_again).count() == 2


def test_a_link_stops_working_when_its_enquiry_is_given_a_new_secret(client, asked):
    url = page_of(asked)
    Enquiry.objects.filter(pk=asked.pk).update(resident_secret="rotated")
    assert client.get(url).status_code == 404


def test_an_altered_or_foreign_token_is_not_a_link(client, asked):
    token = residentlink.token_for(asked)
    for bad in (token[:-1] + ("A" if token[-1] != "A" else "B"), "x" * 5000, "abc", "%00"):
        assert client.get(f"/r/{bad}/").status_code in (400, 404)


def test_an_enquiry_passed_on_takes_no_answer_on_its_page(client):
    approved = EnquiryFactory(state="approved")
    response = client.get(page_of(approved))
    assert "being passed on" in response.content.decode()
    assert 'name="text"' not in response.content.decode()
    assert client.post(page_of(approved), {"text": "more"}).status_code == 409
    assert ResidentAnswer.objects.count() == 0


def test_the_page_asks_for_a_csrf_token_and_refuses_other_methods(client, asked):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    assert strict.post(page_of(asked), {"text": "x"}).status_code == 403
    assert strict.post(page_of(asked) + "new-link/").status_code == 403
    assert client.put(page_of(asked)).status_code == 405
    assert client.get(page_of(asked) + "new-link/").status_code == 405
    assert ResidentAnswer.objects.count() == 0


def test_the_links_expiry_follows_the_setting(asked, settings):
    settings.RESIDENT_LINK_DAYS = 2
    token = residentlink.token_for(asked)
    with time_machine.travel(timezone.now() + timedelta(days=1, hours=23)):
        assert not residentlink.read(token).expired()
    with time_machine.travel(timezone.now() + timedelta(days=2, minutes=1)):
        assert residentlink.read(token).expired()


hostile_text = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["\ud800", "a\x00b", "\u0130" * 20, "x" * 10_001, "<script>alert(1)</script>"]),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=hostile_text, name=st.text(max_size=300), data=st.binary(max_size=64))
def test_hostile_input_on_the_page_never_answers_5xx(client, asked, text, name, data):
    # Lone surrogates as a browser cannot send them but a client can: their UTF-8-like bytes.
    raw = text.encode("utf-8", "surrogatepass")
    response = client.post(
        page_of(asked),
        b"text=" + quote_from_bytes(raw).encode(),
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code < 500
    shown = name.encode("utf-8", "replace").decode() or "f"
    # The test client's own file object refuses a name with no last path part ("/"): the
    # server's handling of such names is held by clean_name's tests.
    files = [SimpleUploadedFile(shown.rsplit("/", 1)[-1] or "f", data)]
    response = client.post(page_of(asked), {"text": shown, "files": files})
    assert response.status_code < 500
    response = client.get(f"/r/{quote_from_bytes(raw[:200])}x/")
    assert response.status_code < 500


def test_the_retention_purge_redacts_the_residents_answers_and_deletes_their_documents(
    client, asked
):
    from intake.retention import REDACTED, redact_enquiry

    client.post(
        page_of(asked),
        {"text": "Flat 3, 14 Mill Lane", "files": [SimpleUploadedFile("id.pdf", PDF)]},
    )
    answer = ResidentAnswer.objects.get(enquiry=asked)
    counts = redact_enquiry(Enquiry.objects.get(pk=asked.pk), now=timezone.now())
    answer.refresh_from_db()
    assert counts["answers"] == 1
    assert answer.text == REDACTED and answer.files.count() == 0
    assert ResidentFile.objects.count() == 0


def test_a_form_larger_than_the_limits_allow_is_refused_before_it_is_read(client, asked, settings):
    settings.RESIDENT_UPLOAD_MAX_FILES, settings.RESIDENT_UPLOAD_MAX_BYTES = 1, 1024
    big = SimpleUploadedFile("scan.pdf", PDF + b"0" * 300 * 1024)
    response = client.post(page_of(asked), {"text": "see scan", "files": [big]})
    assert response.status_code == 413
    assert "too large" in response.content.decode()
    assert ResidentAnswer.objects.count() == 0
