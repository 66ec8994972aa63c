"""The resident's messages at a real SMTP relay (harness.mailserver): each resident-visible
transition sends its message once, counted by Message-ID at the relay; the journal reason
never reaches the resident; a message whose moment has passed is cancelled, not sent."""

from __future__ import annotations

import email
import email.policy

import pytest
from django.db import transaction
from django.utils import timezone

from intake.services import reject_enquiry
from ledger import notices, wording
from ledger.models import JournalEntry, Operation, OperationState
from ledger.proposals import acknowledgement_payload
from ledger.services import LEDGER, approve_revision, propose, propose_resident_message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FINAL = (OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN)


def message_of(enquiry, kind):
    return Operation.objects.filter(enquiry=enquiry, payload__template=kind).first()


def settled(enquiry, kind, *states):
    def check():
        op = message_of(enquiry, kind)
        return op if op is not None and op.state in (states or FINAL) else None

    return check


def texts(mail, op):
    """(text, html, the whole .eml) of the one message the relay holds for ``op``."""
    message_id = notices.message_id(op.idempotency_key)
    [record] = [r for r in mail.messages() if r["message_id"] == message_id]
    raw = mail.read(record)
    message = email.message_from_bytes(raw, policy=email.policy.default)
    return (
        message.get_body(("plain",)).get_content(),
        message.get_body(("html",)).get_content(),
        raw.decode("utf-8", "replace"),
    )


def acknowledge(enquiry):
    with transaction.atomic():
        op, _ = propose(
            enquiry,
            "notify.send",
            acknowledgement_payload(enquiry),
            revision=1,
            detail=wording.RECEIVED,
            actor=LEDGER,
            approve=True,
        )
    return op


def test_passed_on_is_sent_once_when_the_crm_confirms_with_its_reference(
    email_integration, mail, approved_enquiry, run_queue
):
    enquiry, crm = approved_enquiry()
    run_queue(until=settled(enquiry, wording.PASSED_ON))
    crm.refresh_from_db()
    op = message_of(enquiry, wording.PASSED_ON)
    assert crm.state == OperationState.CONFIRMED and op.state == OperationState.CONFIRMED
    assert op.idempotency_key == f"{enquiry.pk}:notify.send:passed_on:r1"
    text, html, _ = texts(mail, op)
    assert f"Their reference for it is {crm.external_id}." in text
    assert enquiry.reference in html and "What happens next" in text
    assert op.payload["template_version"] == wording.current(wording.PASSED_ON).version
    # The attempt records which version of the template its words came from.
    [attempt] = op.attempts.all()
    assert attempt.request_summary["template_version"] == op.payload["template_version"]
    # The transition's message proposed again (a redelivered signal, a sweep): the same one.
    with transaction.atomic():
        again = propose_resident_message(
            enquiry, wording.PASSED_ON, revision=1, destination_reference=crm.external_id
        )
    assert again.pk == op.pk
    run_queue()
    assert mail.count(notices.message_id(op.idempotency_key)) == 1
    assert Operation.objects.filter(enquiry=enquiry, payload__template="passed_on").count() == 1


def test_rejection_sends_the_message_to_the_resident_and_never_the_reason(
    email_integration, mail, make_enquiry, reviewer, run_queue
):
    enquiry = make_enquiry(email="resident@example.org")
    reject_enquiry(
        enquiry.pk,
        actor=reviewer,
        reason="duplicate of HX-9, probably a time-waster",
        resident_message="This is about a private road, which the council does not look after.",
    )
    run_queue(until=settled(enquiry, wording.NOT_TAKEN_FORWARD))
    op = message_of(enquiry, wording.NOT_TAKEN_FORWARD)
    assert op.state == OperationState.CONFIRMED
    text, html, raw = texts(mail, op)
    assert "a private road, which the council does not look after." in text
    assert "a private road, which the council does not look after." in html
    for part in (text, html, raw):
        assert "time-waster" not in part and "duplicate of HX-9" not in part
    entry = JournalEntry.objects.get(enquiry_id=enquiry.pk, action="intake.enquiry.reject")
    assert entry.reason == "duplicate of HX-9, probably a time-waster"
    assert entry.evidence["resident_message"].startswith("This is about a private road")
    assert mail.stats()["received"] == 1


def test_an_acknowledgement_whose_moment_passed_is_cancelled_not_sent(
    email_integration, mail, make_enquiry, reviewer, integrations, run_queue
):
    enquiry = make_enquiry(email="resident@example.org")
    note = acknowledge(enquiry)
    # Approved before a worker got to the acknowledgement: it would say nobody has read it.
    approve_revision(enquiry.pk, actor=reviewer, reason="checked")
    run_queue(until=lambda: Operation.objects.get(pk=note.pk).state == OperationState.CANCELLED)
    note.refresh_from_db()
    assert note.state == OperationState.CANCELLED
    assert mail.count(notices.message_id(note.idempotency_key)) == 0
    cancelled = JournalEntry.objects.filter(
        subject_id=str(note.pk), action="ledger.operation.cancel"
    ).get()
    assert "moment has passed" in cancelled.reason and "nobody has read" in cancelled.reason


def test_a_retried_acknowledgement_after_approval_is_cancelled_not_sent(
    email_integration, mail, make_enquiry, reviewer, make_user, integrations, run_queue
):
    # The relay refuses: e-mail is tried again later (ledger.execution.retrying), and by the
    # time of the next try a reviewer has read and approved the enquiry.
    mail.fault("refuse", count=10)
    enquiry = make_enquiry(email="resident@example.org")
    note = acknowledge(enquiry)
    run_queue(until=lambda: Operation.objects.get(pk=note.pk).attempt_count >= 1)
    mail.clear_faults()
    approve_revision(enquiry.pk, actor=reviewer, reason="checked")
    Operation.objects.filter(pk=note.pk).update(next_attempt_at=timezone.now())
    run_queue(until=lambda: Operation.objects.get(pk=note.pk).state == OperationState.CANCELLED)
    assert mail.count(notices.message_id(note.idempotency_key)) == 0
    assert "Nobody has read it yet" not in "".join(
        mail.read(r).decode("utf-8", "replace") for r in mail.messages()
    )


def test_without_an_address_the_enquiry_says_why_nothing_was_sent(
    email_integration, mail, make_enquiry, reviewer, run_queue
):
    enquiry = make_enquiry(email="")
    reject_enquiry(enquiry.pk, actor=reviewer, reason="spam", resident_message="")
    run_queue()
    assert not Operation.objects.filter(enquiry=enquiry, action="notify.send").exists()
    entry = JournalEntry.objects.get(
        enquiry_id=enquiry.pk, action="ledger.resident_message.not_sent"
    )
    assert "no e-mail address" in entry.reason
    assert entry.evidence["template"] == wording.NOT_TAKEN_FORWARD
    assert mail.stats()["received"] == 0


def test_closing_an_approved_enquiry_sends_the_closed_message_once(
    email_integration, mail, approved_enquiry, sandbox, make_user, run_queue
):
    from ledger.services import cancel_operation

    sandbox.fault("crm.create", "error_503", count=10)
    enquiry, crm = approved_enquiry()
    run_queue(until=lambda: Operation.objects.get(pk=crm.pk).state == OperationState.FAILED)
    cancel_operation(
        crm.pk,
        actor=make_user("admin"),
        reason="CRM refuses this category for good; ops ticket 4411",
        resident_message="We cannot pass this on: the service no longer takes enquiries online.",
    )
    run_queue(until=settled(enquiry, wording.CLOSED))
    op = message_of(enquiry, wording.CLOSED)
    assert op.state == OperationState.CONFIRMED
    text, _html, raw = texts(mail, op)
    assert "the service no longer takes enquiries online." in text
    assert "ops ticket 4411" not in raw and "refuses this category" not in raw
    assert mail.count(notices.message_id(op.idempotency_key)) == 1
    assert mail.stats()["received"] == 1  # no "passed on": it never was


def test_a_category_set_to_send_nothing_sends_nothing_and_says_why(
    email_integration, mail, make_enquiry, reviewer, run_queue
):
    from intake.models import Category

    quiet = Category.objects.create(slug="quiet", name="Told by the service", tells_resident=False)
    enquiry = make_enquiry(email="resident@example.org", category=quiet)
    reject_enquiry(enquiry.pk, actor=reviewer, reason="r", resident_message="Not for us.")
    run_queue()
    assert not Operation.objects.filter(enquiry=enquiry, action="notify.send").exists()
    entry = JournalEntry.objects.get(
        enquiry_id=enquiry.pk, action="ledger.resident_message.not_sent"
    )
    assert "“Told by the service” is set to send residents nothing" in entry.reason
    assert mail.stats()["received"] == 0
