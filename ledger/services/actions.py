"""A person's actions: a revision's approval, and the approval and recovery of an operation.

Every action on an operation runs inside one skeleton (common.operator_action): reason, lock,
offered, permission, then the action's own change, journalled as the actor with that reason.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from intake.classification import record_review_outcome
from intake.models import Enquiry, EnquiryState
from ledger import failpoints, journal, messages, storable
from ledger.execution import schedule_reconcile
from ledger.models import Action, Integration, Operation, OperationState, kind_of, payload_hash
from ledger.policies import (
    APPROVE,
    CANCEL,
    COMPENSATE,
    COMPLETE,
    REASSIGN,
    RECONCILE,
    RETRY,
    policy_for,
)
from ledger.proposals import LEDGER, approve_proposed, crm_payload, propose
from ledger.queueing import EXECUTE, enqueue
from ledger.services.common import (
    ActionRefused,
    operator_action,
    require_permission,
    require_reason,
)

# --- approval -----------------------------------------------------------------------------------


def not_ready_to_approve(enquiry, revision=None) -> str:
    """Why the revision cannot be approved yet, in the reviewer's words: a field the CRM's
    kind requires (ledger.kinds.Kind.requires) that its write would go without. "" when
    nothing is missing (or there is no CRM row to ask)."""
    revision = revision or enquiry.revision
    if revision is None:
        return ""
    integration = Integration.objects.filter(name="crm").first()
    try:
        kind = kind_of(integration) if integration is not None else None
    except LookupError:
        kind = None
    if kind is None:
        return ""
    missing = kind.missing(Action.CREATE_ENQUIRY, crm_payload(enquiry, revision))
    if not missing:
        return ""
    field = missing[0]
    return str(
        messages.NEEDED_BY_DESTINATION.get(field) or messages.NEEDED_FIELD % {"field": field}
    )


def approve_revision(enquiry_id, *, actor, reason="") -> Operation:
    """Enquiry.approve + the CRM operation for that revision approved + its task, one commit.
    Refused, nothing changed, while the CRM's write would lack a field it requires."""
    require_permission(actor, "intake.approve_revision")
    if reason:  # blank: the default reason below
        require_reason(reason)
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id)
        revision = enquiry.revision
        try:
            enquiry.approve(actor=actor, reason=reason, evidence={"revision": revision.number})
        except TransitionNotAllowed as exc:
            raise ActionRefused(
                messages.ENQUIRY_NOT_APPROVABLE % {"state": enquiry.get_state_display()}
            ) from exc
        missing = not_ready_to_approve(enquiry, revision)
        if missing:  # raised inside the block: the transition above is rolled back with it
            raise ActionRefused(missing)
        enquiry.save()
        record_review_outcome(enquiry)  # classification quality: accepted or overridden
        revision.approved_by = actor if isinstance(actor, AbstractBaseUser) else None
        revision.approved_at = timezone.now()
        revision.save(update_fields=["approved_by", "approved_at"])
        payload = crm_payload(enquiry, revision)
        op, _ = propose(
            enquiry, Action.CREATE_ENQUIRY, payload, revision=revision.number, actor=LEDGER
        )
        op = (
            Operation.objects.select_for_update(of=("self",))
            .select_related("integration")
            .get(pk=op.pk)
        )
        if op.state == OperationState.CANCELLED and not op.attempts.filter(kind="call").exists():
            # An earlier proposal of this revision was cancelled before anything was sent (its
            # approval did not stand, or a person stopped it): the revision's approval is the
            # only way to authorise its write, so it must work whatever happened to that
            # proposal. The key <enquiry>:<action>:r<revision> stays unique and reused; it was
            # never sent, so the destination cannot hold a request under it.
            op.repropose(
                actor=LEDGER,
                reason=f"revision {revision.number} approved; nothing was sent under this key",
                evidence={"idempotency_key": op.idempotency_key},
            )
        if op.state == OperationState.APPROVED and op.payload_hash == payload_hash(payload):
            # Approved before this revision was (an operation-level approval, no longer
            # offered): the revision's approval now stands behind it; the worker delivers it.
            journal.record(
                op,
                "ledger.operation.revision_approved",
                actor=actor,
                reason=reason or f"revision {revision.number} approved",
            )
            return op
        if op.state != OperationState.PROPOSED:
            # A write of this revision that was sent (or is live) cannot be approved again under
            # the same key: a cancelled write that was sent only exists for an enquiry that was
            # closed (withdrawn) or revised, neither of which can be approved again.
            raise ActionRefused(
                messages.ALREADY_SENT
                % {"revision": revision.number, "state": op.get_state_display().lower()}
            )
        if op.payload_hash != payload_hash(payload):
            op.payload = payload
            op.payload_hash = payload_hash(payload)
        approve_proposed(op, actor=actor, reason=reason or f"revision {revision.number} approved")
    transaction.on_commit(lambda: failpoints.hit("after_approval", op))
    return op


def approve_operation(op_id, *, actor, reason) -> Operation:
    """A proposed operation (a compensation, for one) approved like any write."""
    with operator_action(op_id, APPROVE, actor=actor, reason=reason) as act:
        approve_proposed(act.op, actor=act.actor, reason=act.reason)
    transaction.on_commit(lambda: failpoints.hit("after_approval", act.op))
    return act.op


# --- a person's recovery actions ----------------------------------------------------------------


def reconcile_now(op_id, *, actor, reason) -> Operation:
    with operator_action(op_id, RECONCILE, actor=actor, reason=reason) as act:
        op = act.op
        act.journal("recovery.operation.reconcile_requested")
        op.attention = ""
        op.lease_owner = ""
        op.lease_expires_at = None
        schedule_reconcile(op, actor=actor, at=timezone.now())
        op.save()
    return op


def retry_operation(op_id, *, actor, reason) -> Operation:
    with operator_action(op_id, RETRY, actor=actor, reason=reason) as act:
        op = act.op
        if op.integration is not None and op.integration.paused:
            raise ActionRefused(messages.PAUSED_RESUME_FIRST % {"integration": op.integration})
        op.budget_used = 0  # a person's retry starts a fresh budget
        op.next_attempt_at = None
        act.transition(op.retry, evidence={"idempotency_key": op.idempotency_key})
        op.save()
        enqueue(op, EXECUTE)
    return op


def complete_by_hand(op_id, *, actor, reason, external_id) -> Operation:
    # The reason is checked first (again in operator_action), as before the skeleton: a form
    # missing both is told about the reason.
    reason = require_reason(reason)
    external_id = (external_id or "").strip()
    if not external_id:
        raise ActionRefused(messages.EXTERNAL_ID_REQUIRED)
    with operator_action(op_id, COMPLETE, actor=actor, reason=reason) as act:
        enquiry, op = act.enquiry, act.op
        op.external_id = external_id
        op.result = {**op.result, "completed_by_hand": True}
        op.next_attempt_at = None
        op.lease_owner = ""
        op.lease_expires_at = None
        act.transition(op.confirm, evidence={"external_id": external_id})
        op.save()
        if op.action == Action.CREATE_ENQUIRY and enquiry.state in (
            EnquiryState.APPROVED,
            EnquiryState.SUBMITTED,
            EnquiryState.SUBMISSION_UNKNOWN,
        ):
            act.transition(
                enquiry.confirm,
                evidence={"operation": str(op.pk), "external_id": external_id, "by_hand": True},
            )
            enquiry.save()
    return op


def cancel_operation(op_id, *, actor, reason, resident_message="") -> Operation:
    """Stop an operation for good. The CRM write of an enquiry waiting on it (approved, or its
    submission unknown) ends the enquiry too (withdrawn: Rejected, not delivered), so that
    needs a reviewer's permission (ledger.models.cancel_permission), checked under the lock;
    ``resident_message`` is then what the resident is told (the "closed" message), apart from
    the reason. Without one, nothing is sent and the enquiry's journal says so."""
    with operator_action(op_id, CANCEL, actor=actor, reason=reason) as act:
        enquiry, op = act.enquiry, act.op
        ends = op.ends_enquiry()
        op.held = False
        op.next_attempt_at = None
        act.transition(op.cancel, evidence={"ends_enquiry": ends})
        op.save()
        if ends:
            # The approved revision will not be delivered. Whether an earlier request may have
            # reached the CRM (sent, no answer) is kept with the outcome: cancelling here does
            # not undo anything there.
            act.transition(
                enquiry.withdraw,
                evidence={
                    "operation": str(op.pk),
                    "outcome": "delivery cancelled",
                    "earlier_request_unanswered": op.unanswered_calls() > 0,
                    **(
                        {"resident_message": storable.text(resident_message, 4000).strip()}
                        if (resident_message or "").strip()
                        else {}
                    ),
                },
            )
            enquiry.save()
    return op


def compensate(op_id, *, actor, reason) -> Operation:
    """A confirmed write is never deleted: propose its compensation (crm.close_enquiry)."""
    with operator_action(op_id, COMPENSATE, actor=actor, reason=reason) as act:
        enquiry, op = act.enquiry, act.op
        policy = policy_for(op)
        earlier = Operation.objects.filter(compensates=op).count()
        payload = {
            "external_id": op.external_id,
            "reason": act.reason,
            "reference": enquiry.reference,
        }
        key = Operation.make_key(enquiry.pk, policy.compensated_by, op.revision)
        if earlier:
            key = f"{key}:n{earlier + 1}"
        compensation = Operation.objects.create(
            enquiry=enquiry,
            action=policy.compensated_by,
            revision=op.revision,
            idempotency_key=key,
            payload=payload,
            payload_hash=payload_hash(payload),
            integration=op.integration,
            compensates=op,
        )
        act.journal(
            "recovery.operation.compensation_proposed",
            subject=compensation,
            evidence={"compensates": str(op.pk), "external_id": op.external_id},
            to_state=OperationState.PROPOSED,
        )
    return compensation


def reassign_operation(op_id, *, actor, reason, owner, given=None) -> Operation:
    """Name ``owner``. ``given``: who owned it without being named (its queue's owner, as the
    console read it), the hand-over's "from" when nobody was named."""
    with operator_action(op_id, REASSIGN, actor=actor, reason=reason) as act:
        op = act.op
        previous = op.owner or given
        op.owner = owner
        op.save(update_fields=["owner", "updated_at"])
        act.journal(
            "recovery.operation.reassigned",
            evidence={
                "from": previous.get_username() if previous else None,
                "to": owner.get_username() if owner else None,
            },
        )
    return op


# --- a refusal only the resident can answer ---------------------------------------------------

# Cancelled, never sent again: the data the destination asked for is the resident's to give.
ASKED_OF_RESIDENT = "superseded: information requested from the resident"


def refused_write(enquiry) -> Operation | None:
    """The enquiry's CRM write of its current revision, refused by the CRM as invalid (a 422
    "phone required"): what the resident may be asked to answer. None otherwise."""
    return (
        Operation.objects.filter(
            enquiry=enquiry,
            action=Action.CREATE_ENQUIRY,
            revision=enquiry.current_revision,
            state=OperationState.FAILED,
            attention__in=("invalid", "payload_mismatch"),
        )
        .order_by("-created_at")
        .first()
    )


def request_information(enquiry_id, *, actor, reason, resident_message="") -> Enquiry:
    """Ask the resident for more (the console's Request information). From approved or
    submitted only when the CRM refused the write as invalid: that write is cancelled
    (journalled, superseded) in the same transaction, the enquiry waits for the resident, and
    their answer (a new revision, reviewed and approved again) makes a new write with a new
    key. ActionRefused otherwise: a write that may still reach the CRM is never left behind."""
    from intake import services as intake_services

    require_reason(reason, actor=actor)
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id)
        if enquiry.state in (EnquiryState.APPROVED, EnquiryState.SUBMITTED):
            op = refused_write(enquiry)
            live = Operation.objects.filter(
                enquiry=enquiry,
                action=Action.CREATE_ENQUIRY,
                state__in=(
                    OperationState.APPROVED,
                    OperationState.SUBMITTED,
                    OperationState.UNKNOWN,
                ),
            )
            if op is None or live.exists():
                raise ActionRefused(
                    f"{enquiry.reference} is {enquiry.get_state_display()}: its CRM write was "
                    "not refused as invalid, so there is nothing to ask the resident."
                )
            op = Operation.objects.select_for_update().get(pk=op.pk)
            op.held = False
            op.cancel(
                actor=actor,
                reason=ASKED_OF_RESIDENT,
                evidence={"revision": op.revision, "why": reason[:300]},
            )
            op.save()
        return intake_services.request_information(
            enquiry_id, actor=actor, reason=reason, resident_message=resident_message
        )
