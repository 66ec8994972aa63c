"""The ledger's services and its answers to intake's signals."""

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django_q.models import OrmQ

from intake import signals
from intake.models import Document, EnquiryState, Revision
from ledger import services
from ledger.models import JournalEntry, Operation, OperationState
from ledger.queueing import EXECUTE, RECONCILE, live_tasks
from tests.ledger.conftest import crm_records


def refreshed(op):
    op.refresh_from_db()
    return op


def test_approve_revision_approves_and_enqueues_in_one_transaction(
    make_enquiry, reviewer, integrations
):
    enquiry = make_enquiry()
    op = services.approve_revision(enquiry.pk, actor=reviewer, reason="looks right")
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.APPROVED
    assert enquiry.approved_revision == 1
    assert op.state == OperationState.APPROVED
    assert op.payload["reference"] == enquiry.reference
    assert op.task_enqueued_at is not None
    assert EXECUTE in live_tasks()[str(op.pk)]  # the queued task carries only the ID
    assert Revision.objects.get(enquiry=enquiry, number=1).approved_by == reviewer


def test_approve_revision_rolls_back_whole(make_enquiry, reviewer, integrations):
    enquiry = make_enquiry()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        services.approve_revision(enquiry.pk, actor=reviewer)
        1 / 0  # noqa: B018
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.READY_FOR_REVIEW
    assert not Operation.objects.filter(state=OperationState.APPROVED).exists()
    assert OrmQ.objects.count() == 0


def test_a_coordinator_cannot_approve(make_enquiry, make_user, integrations):
    enquiry = make_enquiry()
    with pytest.raises(PermissionDenied):
        services.approve_revision(enquiry.pk, actor=make_user("coordinator"))
    assert not Operation.objects.exists()


def test_document_access_removed_is_a_visible_failure_without_invented_fields(
    make_enquiry, integrations, sandbox, run_queue
):
    enquiry = make_enquiry()
    document = Document.objects.create(enquiry=enquiry, document_id="lease-1", version="1")
    sandbox.set_doc_access("lease-1", False)
    with transaction.atomic():
        services.propose_receipt_work(enquiry)
    run_queue()
    op = Operation.objects.get(action="documents.extract")
    document.refresh_from_db()
    assert (op.state, op.attention) == (OperationState.FAILED, "access_denied")
    assert (document.status, document.extracted) == ("access_denied", {})
    # One document's access is not the integration's credentials: nobody is told they broke.
    assert not JournalEntry.objects.filter(action="ledger.integration.credentials_refused")
    assert sandbox.stats()["requests"].get("docs.get") == 1


def test_a_new_revision_cancels_the_approved_write_and_proposes_a_new_one(
    approved_enquiry, reviewer, make_user
):
    from intake.services import revise_enquiry

    enquiry, op = approved_enquiry()
    editor = make_user("reviewer")
    revise_enquiry(enquiry.pk, actor=editor, reason="fix phone", fields={"phone": "0123"})
    op.refresh_from_db()
    assert op.state == OperationState.CANCELLED
    cancelled = JournalEntry.objects.get(subject_id=str(op.pk), to_state="cancelled")
    assert cancelled.reason == "superseded by revision 2"
    new = Operation.objects.get(enquiry=enquiry, revision=2)
    assert (new.action, new.state) == ("crm.create_enquiry", OperationState.PROPOSED)
    approved = services.approve_revision(enquiry.pk, actor=reviewer, reason="ok")
    assert approved.pk == new.pk and approved.state == OperationState.APPROVED
    assert approved.idempotency_key.endswith(":crm.create_enquiry:r2")


def test_a_redelivered_event_nudges_stuck_work_and_adds_nothing(
    approved_enquiry, sandbox, run_queue
):
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    sandbox.capabilities(lookup=False)
    enquiry, op = approved_enquiry()
    run_queue()
    assert refreshed(op).attention == "lookup_unavailable"
    # The person's queue holds it; a redelivery does not take it away from them.
    Operation.objects.filter(pk=op.pk).update(attention="")
    before = Operation.objects.count()
    with transaction.atomic():
        signals.event_redelivered.send(sender=type(enquiry), enquiry=enquiry, event=None)
    assert Operation.objects.count() == before
    assert RECONCILE in live_tasks()[str(op.pk)]
    assert JournalEntry.objects.filter(action="ledger.operation.nudged").count() == 1
    assert sandbox.stats()["requests"]["crm.create"] == 1


def test_compensation_closes_the_record_and_never_deletes_it(
    approved_enquiry, sandbox, run_queue, make_user
):
    _enquiry, op = approved_enquiry()
    run_queue()
    assert refreshed(op).state == OperationState.CONFIRMED
    with pytest.raises(PermissionDenied):
        services.compensate(op.pk, actor=make_user("coordinator"), reason="sent in error")
    admin = make_user("admin")
    close = services.compensate(op.pk, actor=admin, reason="sent in error")
    assert (close.action, close.state, close.compensates_id) == (
        "crm.close_enquiry",
        OperationState.PROPOSED,
        op.pk,
    )
    run_queue()
    assert "crm.close" not in sandbox.stats()["requests"]  # proposed is not approved
    services.approve_operation(close.pk, actor=admin, reason="confirmed with the customer")
    run_queue()
    assert refreshed(close).state == OperationState.CONFIRMED
    assert refreshed(op).state == OperationState.CONFIRMED
    stats = sandbox.stats()["crm"]
    assert (stats["total"], stats["closed"]) == (1, 1)


def test_pause_holds_the_backlog_and_resume_releases_only_what_is_chosen(
    make_enquiry, reviewer, make_user, integrations, sandbox, run_queue
):
    admin = make_user("admin")
    services.pause_integration("crm", actor=admin, reason="CRM maintenance")
    first = services.approve_revision(make_enquiry().pk, actor=reviewer)
    second = services.approve_revision(make_enquiry().pk, actor=reviewer)
    run_queue()
    assert "crm.create" not in sandbox.stats()["requests"]
    assert list(services.backlog("crm")) == [first, second]
    services.resume_integration("crm", actor=admin, reason="maintenance over")
    run_queue()
    assert "crm.create" not in sandbox.stats()["requests"]  # nothing until reviewed
    integrations["crm"].refresh_from_db()
    assert integrations["crm"].awaiting_backlog_review
    services.release_backlog("crm", actor=admin, reason="first checked", operation_ids=[first.pk])
    run_queue()
    assert (refreshed(first).state, refreshed(second).state) == (
        OperationState.CONFIRMED,
        OperationState.APPROVED,
    )
    assert crm_records(sandbox) == 1
    services.release_backlog("crm", actor=admin, reason="rest checked")
    run_queue()
    assert refreshed(second).state == OperationState.CONFIRMED
    integrations["crm"].refresh_from_db()
    assert not integrations["crm"].awaiting_backlog_review
    with pytest.raises(PermissionDenied):
        services.pause_integration("crm", actor=reviewer, reason="no")


def test_person_actions_need_a_reason_and_the_right_state(
    approved_enquiry, sandbox, run_queue, make_user
):
    coordinator, admin = make_user("coordinator"), make_user("admin")
    sandbox.fault("crm.create", "error_422")
    enquiry, op = approved_enquiry()
    run_queue()
    assert refreshed(op).state == OperationState.FAILED
    # Cancelling the write would close the approved enquiry: a reviewer's decision (issue 19).
    assert services.allowed_actions(op, coordinator) == ["complete_by_hand", "reassign"]
    assert "retry" in services.allowed_actions(op, admin)
    with pytest.raises(services.ActionRefused):
        services.retry_operation(op.pk, actor=admin, reason=" ")
    with pytest.raises(PermissionDenied):
        services.retry_operation(op.pk, actor=coordinator, reason="try again")
    with pytest.raises(services.ActionRefused):
        services.reconcile_now(op.pk, actor=coordinator, reason="look")  # not unknown
    services.retry_operation(op.pk, actor=admin, reason="fields fixed at the CRM side")
    run_queue()
    assert refreshed(op).state == OperationState.CONFIRMED
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert crm_records(sandbox, enquiry.reference) == 1


def test_complete_by_hand_and_cancel(approved_enquiry, sandbox, run_queue, make_user):
    coordinator = make_user("coordinator")
    sandbox.fault("crm.create", "error_422", count=2)
    first, op1 = approved_enquiry()
    second, op2 = approved_enquiry()
    run_queue()
    services.complete_by_hand(op1.pk, actor=coordinator, reason="typed in", external_id="CRM-9")
    services.reassign_operation(op2.pk, actor=coordinator, reason="mine", owner=coordinator)
    assert refreshed(op2).owner == coordinator
    with pytest.raises(PermissionDenied):  # it would close the enquiry: a reviewer decides
        services.cancel_operation(op2.pk, actor=coordinator, reason="customer withdrew")
    assert refreshed(op2).state == OperationState.FAILED
    services.cancel_operation(op2.pk, actor=make_user("reviewer"), reason="customer withdrew")
    first.refresh_from_db()
    second.refresh_from_db()
    assert (refreshed(op1).state, op1.external_id, first.state) == (
        OperationState.CONFIRMED,
        "CRM-9",
        EnquiryState.CONFIRMED,
    )
    assert (refreshed(op2).state, second.state) == (OperationState.CANCELLED, EnquiryState.REJECTED)
