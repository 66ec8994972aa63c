"""No dead end between editing, approving and cancelling an enquiry's CRM write.

Walks every order of the people's and the worker's moves on one enquiry (depth-first, each
move in a savepoint that is rolled back afterwards, states already seen skipped) and checks, in
every state reached, that the enquiry can still get out: waiting for review, a reviewer who did
not edit it can approve it (and its write is then queued for delivery); approved, its write is
alive; rejected is a decision. Issue 19, defect 1: an operation-level approval of an
unreviewed revision, cancelled by the worker, used to make the revision unapprovable.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django_fsm import TransitionNotAllowed

from intake import services as intake_services
from intake.models import Enquiry, EnquiryState
from ledger import execution
from ledger import services as ledger_services
from ledger.integrations import ensure_integrations
from ledger.models import Operation, OperationState

REFUSED = (
    intake_services.ActionRefused,
    ledger_services.ActionRefused,
    PermissionDenied,
    TransitionNotAllowed,
)
MAX_REVISIONS = 3
CRM = "crm.create_enquiry"


def crm_ops(enquiry_id):
    return list(Operation.objects.filter(enquiry_id=enquiry_id, action=CRM).order_by("revision"))


def signature(enquiry_id):
    enquiry = Enquiry.objects.get(pk=enquiry_id)
    return (
        enquiry.state,
        enquiry.current_revision,
        enquiry.approved_revision,
        enquiry.revision.created_by_id,
        tuple((op.revision, op.state) for op in crm_ops(enquiry_id)),
    )


def moves(enquiry_id, people):
    """(name, call) for every move a person or a worker could make now."""
    enquiry = Enquiry.objects.get(pk=enquiry_id)
    editor, approver, coordinator = people["rita"], people["alex"], people["casey"]
    found = []
    if enquiry.current_revision < MAX_REVISIONS:
        found.append(
            (
                "rita edits",
                lambda: intake_services.revise_enquiry(
                    enquiry_id,
                    actor=editor,
                    reason="adds a phone number",
                    fields={"phone": f"0700{enquiry.current_revision}"},
                ),
            )
        )
    for who in (editor, approver):
        found.append(
            (
                f"{who.username} approves the revision",
                lambda who=who: ledger_services.approve_revision(
                    enquiry_id, actor=who, reason="checked"
                ),
            )
        )
    found.append(
        (
            "rita rejects",
            lambda: intake_services.reject_enquiry(
                enquiry_id, actor=editor, reason="spam", resident_message="Not for us."
            ),
        )
    )
    for op in crm_ops(enquiry_id):
        for who in (editor, approver):
            found.append(
                (
                    f"{who.username} approves operation r{op.revision}",
                    lambda op=op, who=who: ledger_services.approve_operation(
                        op.pk, actor=who, reason="looks fine"
                    ),
                )
            )
        found.append(
            (
                f"casey cancels operation r{op.revision}",
                lambda op=op: ledger_services.cancel_operation(
                    op.pk, actor=coordinator, reason="not needed"
                ),
            )
        )
        if op.state == OperationState.APPROVED and op.revision != enquiry.approved_revision:
            # The worker's claim of a write whose approval no longer stands cancels it. (A
            # write whose approval stands would be sent: that is delivery, out of this walk.)
            found.append((f"worker claims r{op.revision}", lambda op=op: execution.claim(op.pk)))
    return found


def way_out(enquiry_id, approver) -> str | None:
    """None when the enquiry can still reach a decision or delivery; else what is stuck."""
    enquiry = Enquiry.objects.get(pk=enquiry_id)
    if enquiry.state == EnquiryState.REJECTED:
        return None
    if enquiry.state == EnquiryState.APPROVED:
        live = [
            op
            for op in crm_ops(enquiry_id)
            if op.revision == enquiry.approved_revision and op.state == OperationState.APPROVED
        ]
        return None if live else f"approved r{enquiry.approved_revision} with no live write"
    if enquiry.state != EnquiryState.READY_FOR_REVIEW:
        return f"unexpected state {enquiry.state}"
    point = transaction.savepoint()
    try:
        op = ledger_services.approve_revision(enquiry_id, actor=approver, reason="checked")
        enquiry.refresh_from_db()
        if enquiry.state != EnquiryState.APPROVED or op.state != OperationState.APPROVED:
            return f"approval left the enquiry {enquiry.state}, its write {op.state}"
        if op.revision != enquiry.current_revision:
            return f"approval queued revision {op.revision}, not {enquiry.current_revision}"
        return None
    except REFUSED as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        transaction.savepoint_rollback(point)


@pytest.mark.django_db
def test_no_order_of_edit_approve_and_cancel_leaves_an_enquiry_stuck(make_enquiry, make_user):
    ensure_integrations()
    people = {
        "rita": make_user("reviewer", username="rita"),
        "alex": make_user("admin", username="alex"),
        "casey": make_user("coordinator", username="casey"),
    }
    enquiry_id = make_enquiry().pk
    seen: set = set()
    stuck: list[str] = []

    def walk(path):
        key = signature(enquiry_id)
        if key in seen:
            return
        seen.add(key)
        problem = way_out(enquiry_id, people["alex"])
        if problem:
            stuck.append(f"{' -> '.join(path) or 'start'}: {problem}")
            return
        for name, call in moves(enquiry_id, people):
            point = transaction.savepoint()
            try:
                call()
            except REFUSED:
                transaction.savepoint_rollback(point)
                continue
            walk([*path, name])
            transaction.savepoint_rollback(point)

    walk([])
    assert not stuck, "\n".join(stuck)
    # The walk went where the defect was: an edited revision, its write cancelled, approved.
    assert len(seen) > 10
    assert any(state == EnquiryState.REJECTED for state, *_ in seen)
    assert any(
        state == EnquiryState.READY_FOR_REVIEW
        and any(s == OperationState.CANCELLED for _, s in ops)
        for state, _, _, _, ops in seen
    )


@pytest.mark.django_db
def test_a_write_of_an_unreviewed_revision_cannot_be_approved_on_its_own(make_enquiry, make_user):
    ensure_integrations()
    rita, alex = make_user("reviewer", username="rita"), make_user("admin", username="alex")
    enquiry = make_enquiry()
    intake_services.revise_enquiry(enquiry.pk, actor=rita, reason="phone", fields={"phone": "07"})
    (op,) = crm_ops(enquiry.pk)
    assert op.state == OperationState.PROPOSED
    for who in (rita, alex):
        with pytest.raises(ledger_services.ActionRefused):
            ledger_services.approve_operation(op.pk, actor=who, reason="fine")
        assert "approve" not in ledger_services.allowed_actions(op, who)
    op.refresh_from_db()
    assert op.state == OperationState.PROPOSED


@pytest.mark.django_db
def test_approving_reuses_a_cancelled_never_sent_write_under_its_key(make_enquiry, make_user):
    ensure_integrations()
    rita, alex = make_user("reviewer", username="rita"), make_user("admin", username="alex")
    enquiry = make_enquiry()
    intake_services.revise_enquiry(enquiry.pk, actor=rita, reason="phone", fields={"phone": "07"})
    (op,) = crm_ops(enquiry.pk)
    with transaction.atomic():
        op.cancel(actor="system:tests", reason="stopped before review")
        op.save()

    approved = ledger_services.approve_revision(enquiry.pk, actor=alex, reason="checked")

    assert approved.pk == op.pk
    assert approved.state == OperationState.APPROVED
    assert approved.idempotency_key == f"{enquiry.pk}:{CRM}:r2"
    assert Operation.objects.filter(enquiry=enquiry, action=CRM).count() == 1
