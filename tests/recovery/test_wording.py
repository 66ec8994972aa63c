"""The console's side of the words residents receive (recovery.views.wording): the preview of
an action's e-mail on its form, and the admins' template pages (refused when the words would
not fill, versioned and journalled when they do)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from intake.models import EnquiryState
from ledger import wording
from ledger.models import JournalEntry, MessageTemplate, Operation

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script> {{ ''.__class__ }} {% csrf_token %} {reference} \u202e"


def test_the_preview_is_the_whole_email_with_the_message_and_never_the_reason(story, client_for):
    enquiry = story.enquiry("ready_for_review", email="ann@example.org")
    url = reverse("recovery:enquiry-preview", args=[enquiry.reference, "request_information"])
    response = client_for("reviewer").post(
        url, {"resident_message": HOSTILE, "reason": "internal: she called twice"}
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "ann@example.org" in page
    assert f"We need more information about your enquiry {enquiry.reference}" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert "{{ &#x27;&#x27;.__class__ }} {% csrf_token %} {reference}" in page  # as typed
    assert "internal" not in page and "called twice" not in page
    assert Operation.objects.count() == 0  # a preview sends and records nothing


def test_the_preview_is_refused_to_those_who_may_not_take_the_action(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    url = reverse("recovery:enquiry-preview", args=[enquiry.reference, "reject"])
    assert client_for("coordinator").post(url, {"resident_message": "x"}).status_code == 403
    assert client_for("reviewer").get(url).status_code == 405
    bad = reverse("recovery:enquiry-preview", args=[enquiry.reference, "approve_revision"])
    assert client_for("reviewer").post(bad, {}).status_code == 404


def test_the_form_shows_both_texts_labelled_and_the_preview(story, client_for):
    enquiry = story.enquiry("ready_for_review", email="ann@example.org")
    page = (
        client_for("reviewer")
        .get(reverse("recovery:review-item", args=[enquiry.reference]))
        .content.decode()
    )
    assert "Message to the resident" in page
    assert "sent to them by e-mail, word for word" in page
    assert "stays inside Handover: written to the journal, never sent" in page
    assert 'name="resident_message"' in page and "What the resident receives" in page
    assert "[Your message to the resident appears here, word for word.]" in page


def test_a_refused_form_keeps_both_texts_and_names_the_missing_message(story, client_for):
    enquiry = story.enquiry("ready_for_review", email="ann@example.org")
    url = reverse("recovery:enquiry-request-information", args=[enquiry.reference])
    response = client_for("reviewer").post(
        url, {"reason": "needs the address", "resident_message": " \u200b "}
    )
    assert response.status_code == 422
    page = response.content.decode()
    assert "Write the message to the resident" in page
    assert "needs the address" in page
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.READY_FOR_REVIEW


def test_an_admin_saves_a_new_version_with_a_reason(client_for, people):
    url = reverse("recovery:message-template", args=[wording.PASSED_ON])
    before = wording.current(wording.PASSED_ON).version
    response = client_for("admin").post(
        url,
        {
            "subject": "Passed on: {reference}",
            "body": "Dear {name},\n\nIt is with the service as {destination_reference}.\n",
            "reason": "shorter, as customer services asked",
            "save": "1",
        },
    )
    assert response.status_code == 302
    row = wording.current(wording.PASSED_ON)
    assert row.version == before + 1 and row.created_by == people["admin"]
    entry = JournalEntry.objects.get(subject_type="ledger.messagetemplate", subject_id=str(row.pk))
    assert entry.reason == "shorter, as customer services asked"
    page = client_for("admin").get(url).content.decode()
    assert "shorter, as customer services asked" in page  # the versions list says why


@pytest.mark.parametrize(
    "body",
    [
        "Dear {nam},\n{message_to_resident}",
        "Dear {name,\n{message_to_resident}",
        "{% load static %}{message_to_resident}",
        "Dear {name}",  # the reviewer's message would never reach the resident
        "{reference.__class__.__init__.__globals__} {message_to_resident}",
    ],
)
def test_a_template_that_would_not_fill_is_refused_at_save(client_for, body):
    url = reverse("recovery:message-template", args=[wording.NOT_TAKEN_FORWARD])
    for kind in wording.KINDS:  # version 1 of each, as a migrated database has it
        wording.current(kind)
    before = MessageTemplate.objects.count()
    response = client_for("admin").post(
        url, {"subject": "About {reference}", "body": body, "reason": "try", "save": "1"}
    )
    assert response.status_code == 422
    assert MessageTemplate.objects.count() == before
    assert not JournalEntry.objects.filter(action="ledger.message_template.changed").exists()


def test_a_hostile_template_is_saved_as_text_and_renders_inert(story, client_for):
    enquiry = story.enquiry("ready_for_review", email="ann@example.org")
    url = reverse("recovery:message-template", args=[wording.NEEDS_INFORMATION])
    body = "{{ ''.__class__.__mro__ }} {{% debug %}} <b>hi</b>\n{message_to_resident}\n"
    response = client_for("admin").post(
        url,
        {
            "subject": "{{ settings.SECRET_KEY }} {reference}",
            "body": body,
            "reason": "testing",
            "preview": "1",
            "reference": enquiry.reference,
        },
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "{ &#x27;&#x27;.__class__.__mro__ }" in page and "{% debug %}" in page
    assert "&lt;b&gt;hi&lt;/b&gt;" in page
    assert "{ settings.SECRET_KEY } " + enquiry.reference in page
    assert "dev-insecure" not in page and "&lt;class" not in page
    assert MessageTemplate.objects.filter(kind=wording.NEEDS_INFORMATION).count() == 1  # not saved


def test_only_admins_edit_the_words(client_for):
    url = reverse("recovery:message-template", args=[wording.RECEIVED])
    assert client_for("reviewer").get(url).status_code == 403
    assert client_for("admin").get(url).status_code == 200
    assert client_for("admin").get("/console/messages/no_such_kind/").status_code == 404


def test_the_item_says_why_the_resident_was_not_told(story, client_for):
    enquiry = story.enquiry("ready_for_review", email="")
    response = client_for("reviewer").post(
        reverse("recovery:enquiry-reject", args=[enquiry.reference]),
        {"reason": "spam", "resident_message": ""},
    )
    assert response.status_code == 302
    page = (
        client_for("reviewer")
        .get(reverse("recovery:enquiry", args=[enquiry.reference]))
        .content.decode()
    )
    assert "Nothing sent to the resident" in page
    assert "no e-mail address: the resident gave none" in page


def test_cancelling_the_write_that_closes_the_enquiry_asks_for_the_message(story, client_for):
    op = story.operation("failed", attention="retry_budget_exhausted")
    assert op.ends_enquiry() and op.enquiry.email
    reviewer = client_for("reviewer")
    page = reviewer.get(reverse("recovery:enquiry", args=[op.enquiry.reference])).content
    page = page.decode()
    assert f'id="res-{op.pk}-cancel"' in page and "stays inside Handover" in page
    url = reverse("recovery:op-cancel", args=[op.pk])
    refused = reviewer.post(url, {"reason": "CRM ticket 77", "resident_message": ""})
    assert refused.status_code == 422
    assert "Write the message to the resident" in refused.content.decode()
    done = reviewer.post(
        url, {"reason": "CRM ticket 77", "resident_message": "We have closed it, sorry."}
    )
    assert done.status_code == 302
    closed = Operation.objects.get(enquiry=op.enquiry, payload__template=wording.CLOSED)
    assert "We have closed it, sorry." in closed.payload["body"]
    assert "ticket 77" not in str(closed.payload)
