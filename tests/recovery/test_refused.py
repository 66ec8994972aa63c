"""A CRM write refused for data only the resident has (a 422 "phone required"): the reviewer
asks the resident from the item page, the refused write is cancelled, and the resident's answer
comes back to review; its approval makes a new write with a new key (recovery.refused,
ledger.services.request_information)."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from intake.answers import receive_answer
from intake.models import EnquiryState
from ledger.models import JournalEntry, Operation, OperationState
from ledger.services import approve_revision
from ledger.services.actions import ASKED_OF_RESIDENT
from tests.ledger.conftest import crm_records
from tests.recovery.pages import card, item_url, text


def refused_write(approved_enquiry, sandbox, run_queue):
    sandbox.fault("crm.create", "error_422")
    enquiry, op = approved_enquiry()
    run_queue(until=lambda: Operation.objects.get(pk=op.pk).state == OperationState.FAILED)
    op.refresh_from_db()
    assert op.attention == "invalid"
    return enquiry, op


def test_reviewer_asks_the_resident_and_the_answer_makes_one_new_write(
    approved_enquiry, sandbox, run_queue, make_user
):
    enquiry, op = refused_write(approved_enquiry, sandbox, run_queue)
    assert crm_records(sandbox, enquiry.reference) == 0  # the refused write made nothing
    reviewer = make_user("reviewer", username="robin")
    client = Client()
    client.force_login(reviewer)

    page = client.get(item_url(op))
    assert 'id="act-enq-request_information"' in page.content.decode()
    safe = text(page).split("Safe now", 1)[1]
    assert "Request information asks them" in safe.split("Lifecycle", 1)[0]

    url = reverse("recovery:enquiry-request-information", args=[enquiry.reference])
    answer = client.post(
        url,
        {
            "reason": "the CRM needs a phone number for housing repairs",
            "resident_message": "Please tell us a phone number we can reach you on.",
        },
    )
    assert answer.status_code in (200, 302), text(answer)[:2000]
    enquiry.refresh_from_db()
    op.refresh_from_db()
    assert enquiry.state == EnquiryState.NEEDS_INFORMATION
    assert op.state == OperationState.CANCELLED
    rows = JournalEntry.objects.filter(enquiry=enquiry)
    assert rows.filter(
        subject_id=str(op.pk), to_state="cancelled", reason=ASKED_OF_RESIDENT
    ).exists()
    assert rows.filter(action="intake.enquiry.request_information").count() == 1

    receive_answer(enquiry.pk, channel="page", text="My phone is 07700 900123.")
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.READY_FOR_REVIEW
    assert enquiry.current_revision == op.revision + 1

    sandbox.clear_faults()
    new = approve_revision(enquiry.pk, actor=reviewer, reason="phone given")
    assert new.pk != op.pk and new.idempotency_key != op.idempotency_key
    run_queue(until=lambda: Operation.objects.get(pk=new.pk).state == OperationState.CONFIRMED)
    assert crm_records(sandbox, enquiry.reference) == 1
    assert sandbox.stats()["requests"]["crm.create"] == 2  # the refusal, then the new write


def test_request_information_is_refused_on_an_approved_enquiry_whose_write_was_not_refused(
    approved_enquiry, make_user
):
    enquiry, op = approved_enquiry()
    reviewer = make_user("reviewer", username="robin")
    client = Client()
    client.force_login(reviewer)
    assert 'id="act-enq-request_information"' not in client.get(item_url(op)).content.decode()
    client.post(
        reverse("recovery:enquiry-request-information", args=[enquiry.reference]),
        {"reason": "trying", "resident_message": "Tell us more."},
    )
    enquiry.refresh_from_db()
    op.refresh_from_db()
    assert enquiry.state == EnquiryState.APPROVED
    assert op.state == OperationState.APPROVED


def test_safe_now_on_a_refused_write_names_only_what_the_coordinator_is_offered(
    approved_enquiry, sandbox, run_queue, make_user
):
    _enquiry, op = refused_write(approved_enquiry, sandbox, run_queue)
    coordinator = make_user("coordinator", username="casey")
    client = Client()
    client.force_login(coordinator)
    html = card(client.get(item_url(op)), op)
    safe = text_of(html).split("Safe now", 1)[1]
    assert "Edit the enquiry" not in safe
    assert "A reviewer may ask the resident (Request information)" in safe


def text_of(html):
    import re
    from html import unescape

    html = re.sub(r"<details.*?</details>", "", html, flags=re.S)
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))
