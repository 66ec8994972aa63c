"""The ledger's services: what the console, intake's signals and the drill call.

Every function is keyword-only after its subject, and follows one shape: lock (enquiry, then
operation), re-check, transition, save, journal, enqueue, all in one transaction. The ORM
broker makes the enqueue part of that transaction.

Errors: ActionRefused (a ValueError) when the state or the policy says no; Django's
PermissionDenied when the actor's role says no.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from intake.models import Document, Enquiry, EnquiryState
from intake.workflow import actor_label, system_actor
from ledger import failpoints, journal
from ledger.execution import lock_operation, schedule_reconcile
from ledger.integrations import ensure_integrations
from ledger.models import Integration, Op, Operation, cancel_permission, payload_hash
from ledger.policies import (
    APPROVE,
    CANCEL,
    COMPENSATE,
    COMPLETE,
    PERMISSIONS,
    REASSIGN,
    RECONCILE,
    RETRY,
    allowed_actions,
    policy_for,
    state_allows,
)
from ledger.queueing import EXECUTE, batched, enqueue
from ledger.queueing import RECONCILE as RECONCILE_TASK

__all__ = [
    "ActionRefused",
    "allowed_actions",
    "appointment_slots",
    "approve_operation",
    "approve_revision",
    "backlog",
    "cancel_operation",
    "compensate",
    "complete_by_hand",
    "configure_integration",
    "nudge_enquiry",
    "pause_integration",
    "propose_receipt_work",
    "reassign_operation",
    "reconcile_now",
    "release_backlog",
    "request_appointment_slots",
    "resume_integration",
    "retry_operation",
    "supersede_revision",
]

LEDGER = system_actor("ledger")
ACKNOWLEDGEMENT_TEMPLATE = "enquiry_received"


class ActionRefused(ValueError):
    """The operation's state or policy does not allow this action now."""


# --- helpers ------------------------------------------------------------------------------------


def _require(actor, permission):
    if isinstance(actor, AbstractBaseUser):
        if not (actor.is_active and actor.has_perm(permission)):
            raise PermissionDenied(f"{actor_label(actor)} may not do this ({permission})")
    elif not str(actor).startswith("system:"):
        raise PermissionDenied(f"{actor} may not do this")


def _reason(reason):
    reason = (reason or "").strip()
    if not reason:
        raise ActionRefused("A reason is required.")
    return reason


def _locked(op_id):
    enquiry, op = lock_operation(op_id)
    if op is None:
        raise ActionRefused("No such operation.")
    return enquiry, op


def _offer(op, action):
    if action not in state_allows(op):
        raise ActionRefused(
            f"{action.replace('_', ' ')} is not possible for a {op.state} {op.action}."
        )


def integration(name) -> Integration:
    try:
        return Integration.objects.get(name=name)
    except Integration.DoesNotExist:
        return ensure_integrations()[name]


def _operation_key(enquiry, action, revision, detail="") -> str:
    if detail:
        return f"{enquiry.pk}:{action}:{detail}:r{revision}"
    return Operation.make_key(enquiry.pk, action, revision)


def _operation_fields(enquiry, action, payload, revision, integrations=None) -> dict:
    policy = policy_for(action)
    name = policy.integration
    if not name:
        target = None
    elif integrations is not None and name in integrations:
        target = integrations[name]
    else:
        target = integration(name)
    return {
        "enquiry": enquiry,
        "action": action,
        "revision": revision,
        "payload": payload,
        "payload_hash": payload_hash(payload),
        "integration": target,
    }


def _journal_proposed(op, *, actor, reason):
    journal.record(
        op,
        "ledger.operation.proposed",
        actor=actor,
        reason=reason or f"{op.action} for revision {op.revision}",
        evidence={"idempotency_key": op.idempotency_key, "payload_hash": op.payload_hash},
        to_state=Op.PROPOSED,
    )


def propose(
    enquiry,
    action,
    payload,
    *,
    revision,
    actor,
    detail="",
    approve=False,
    reason="",
):
    """Record an operation (idempotent on its key); a system-approved one is approved and
    enqueued at once. Returns (operation, created)."""
    key = _operation_key(enquiry, action, revision, detail)
    defaults = _operation_fields(enquiry, action, payload, revision)
    op, created = Operation.objects.get_or_create(idempotency_key=key, defaults=defaults)
    if created:
        _journal_proposed(op, actor=actor, reason=reason)
    if approve and op.state == Op.PROPOSED:
        _approve(op, actor=actor, reason=reason or "approved by policy (no review needed)")
    return op, created


def _approve(op, *, actor, reason, save=True):
    """Approve ``op`` and enqueue it (or hold it: its integration is paused). ``save=False``:
    the caller inserts the new row itself (the receipt's bulk insert)."""
    op.approve(actor=actor, reason=reason, evidence={"payload_hash": op.payload_hash})
    if op.integration is not None and op.integration.paused:
        op.held = True
    if not op.held:
        # The task row and this save are one transaction; the save records task_enqueued_at.
        enqueue(op, EXECUTE, save=False)
    if save:
        op.save()
    if op.held:
        journal.record(
            op, "ledger.operation.held", actor=actor, reason=f"{op.integration} is paused"
        )


def crm_payload(enquiry, revision) -> dict:
    """What the CRM receives for an approved revision: the reference and the reviewed fields."""
    return {
        "reference": enquiry.reference,
        "revision": revision.number,
        "category": revision.category.slug if revision.category_id else None,
        "source": enquiry.source,
        "fields": revision.fields,
    }


def acknowledgement_payload(enquiry) -> dict:
    # Receipt is not delivery: the customer is told we *received* it, never that it was reviewed.
    return {
        "to": enquiry.email,
        "template": ACKNOWLEDGEMENT_TEMPLATE,
        "reference": enquiry.reference,
        "body": (
            f"We have received your enquiry. Your reference is {enquiry.reference}. "
            "Please quote it if you contact us about this enquiry."
        ),
    }


# --- intake's signals ---------------------------------------------------------------------------


def _receipt_specs(enquiry, documents):
    """(action, payload, revision, detail, reason) for each piece of receipt work."""
    revision = enquiry.current_revision
    specs = [("suggest.category", {}, revision, "", "")]
    for document in documents:
        specs.append(
            (
                "documents.extract",
                {"document_id": document.document_id, "version": document.version},
                revision,
                f"{document.document_id}@v{document.version}",
                "",
            )
        )
    if enquiry.email:
        specs.append(
            (
                "notify.send",
                acknowledgement_payload(enquiry),
                1,
                ACKNOWLEDGEMENT_TEMPLATE,
                "acknowledge receipt",
            )
        )
    return specs


def propose_receipt_work(enquiry, *, actor=LEDGER):
    """The receipt's work: the suggestion, one extraction per attached document, the
    acknowledgement, all system-approved and enqueued in the caller's transaction.

    Called by the receipt's task (ledger.receipt), never inside the intake request. The keys
    the enquiry already holds are read first and an existing operation is returned as it is;
    the new ones are the rows propose() writes (each operation proposed, then approved through
    its transition, journalled and enqueued), inserted in one statement per table instead of
    one per row (docs/benchmarks.md).
    """
    documents = _attached_documents(enquiry)
    specs = _receipt_specs(enquiry, documents)
    known = set(Operation.objects.filter(enquiry=enquiry).values_list("idempotency_key", flat=True))
    names = {policy_for(spec[0]).integration for spec in specs} - {None, ""}
    integrations = Integration.objects.in_bulk(names, field_name="name") if names else {}
    ops, fresh = [], []
    with journal.deferred(), batched():
        for action, payload, revision, detail, reason in specs:
            key = _operation_key(enquiry, action, revision, detail)
            if key in known:
                op, _ = propose(
                    enquiry,
                    action,
                    payload,
                    revision=revision,
                    detail=detail,
                    actor=actor,
                    approve=True,
                    reason=reason,
                )
            else:
                fields = _operation_fields(enquiry, action, payload, revision, integrations)
                op = Operation(idempotency_key=key, **fields)
                _journal_proposed(op, actor=actor, reason=reason)
                _approve(
                    op,
                    actor=actor,
                    reason=reason or "approved by policy (no review needed)",
                    save=False,
                )
                fresh.append(op)
            ops.append(op)
        # Inside the block: the operations go in before their journal and task rows.
        Operation.objects.bulk_create(fresh)
    for op in fresh:
        # As save() does: the row now holds "approved", the state a later save() checks for.
        op._update_initial_state()
    return ops


def _attached_documents(enquiry):
    documents = list(Document.objects.filter(enquiry=enquiry))
    if documents:
        return documents
    for item in enquiry.documents or []:
        if isinstance(item, dict):
            doc_id = str(item.get("id") or item.get("document_id") or "").strip()
            version = str(item.get("version") or "").strip()
        else:
            doc_id, version = str(item).strip(), ""
        if doc_id:
            document, _ = Document.objects.get_or_create(
                enquiry=enquiry, document_id=doc_id, version=version
            )
            documents.append(document)
    return documents


def supersede_revision(enquiry, new_revision, *, actor=LEDGER):
    """Revision N+1 exists: the approval of N does not carry over; its CRM write is cancelled
    and a new one proposed for N+1 (approved only by a reviewer's approve_revision)."""
    number = new_revision.number
    stale = Operation.objects.select_for_update().filter(
        enquiry=enquiry,
        action="crm.create_enquiry",
        revision__lt=number,
        state__in=[Op.PROPOSED, Op.APPROVED, Op.FAILED],
    )
    for op in stale:
        op.held = False
        op.cancel(
            actor=actor,
            reason=f"superseded by revision {number}",
            evidence={"revision": op.revision, "superseded_by": number},
        )
        op.save()
    propose(
        enquiry,
        "crm.create_enquiry",
        crm_payload(enquiry, new_revision),
        revision=number,
        actor=actor,
        reason=f"revision {number} made; waits for a reviewer's approval",
    )


def nudge_enquiry(enquiry, *, actor=LEDGER, reason="event delivered again"):
    """A repeated delivery: reconcile stuck work now. Never restarts it, never adds work."""
    nudged = []
    now = timezone.now()
    for op in Operation.objects.filter(enquiry=enquiry, state=Op.UNKNOWN, attention=""):
        if op.lease_expires_at and op.lease_expires_at > now:
            continue  # someone is looking right now
        op.next_attempt_at = None
        op.save(update_fields=["next_attempt_at", "updated_at"])
        enqueue(op, RECONCILE_TASK)
        journal.record(op, "ledger.operation.nudged", actor=actor, reason=reason)
        nudged.append(op)
    return nudged


# --- approval -----------------------------------------------------------------------------------


def approve_revision(enquiry_id, *, actor, reason="") -> Operation:
    """Enquiry.approve + the CRM operation for that revision approved + its task, one commit."""
    _require(actor, "intake.approve_revision")
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id)
        revision = enquiry.revision
        try:
            enquiry.approve(actor=actor, reason=reason, evidence={"revision": revision.number})
        except TransitionNotAllowed as exc:
            raise ActionRefused(
                f"A {enquiry.get_state_display()} enquiry cannot be approved."
            ) from exc
        enquiry.save()
        revision.approved_by = actor if isinstance(actor, AbstractBaseUser) else None
        revision.approved_at = timezone.now()
        revision.save(update_fields=["approved_by", "approved_at"])
        payload = crm_payload(enquiry, revision)
        op, _ = propose(
            enquiry, "crm.create_enquiry", payload, revision=revision.number, actor=LEDGER
        )
        op = (
            Operation.objects.select_for_update(of=("self",))
            .select_related("integration")
            .get(pk=op.pk)
        )
        if op.state == Op.CANCELLED and not op.attempts.filter(kind="call").exists():
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
        if op.state == Op.APPROVED and op.payload_hash == payload_hash(payload):
            # Approved before this revision was (an operation-level approval, no longer
            # offered): the revision's approval now stands behind it; the worker delivers it.
            journal.record(
                op,
                "ledger.operation.revision_approved",
                actor=actor,
                reason=reason or f"revision {revision.number} approved",
            )
            return op
        if op.state != Op.PROPOSED:
            # A write of this revision that was sent (or is live) cannot be approved again under
            # the same key: a cancelled write that was sent only exists for an enquiry that was
            # closed (withdrawn) or revised, neither of which can be approved again.
            raise ActionRefused(
                f"Revision {revision.number} already has a {op.get_state_display().lower()} "
                "CRM write that was sent; it cannot be approved again under the same key."
            )
        if op.payload_hash != payload_hash(payload):
            op.payload = payload
            op.payload_hash = payload_hash(payload)
        _approve(op, actor=actor, reason=reason or f"revision {revision.number} approved")
    transaction.on_commit(lambda: failpoints.hit("after_approval"))
    return op


def approve_operation(op_id, *, actor, reason) -> Operation:
    """A proposed operation (a compensation, for one) approved like any write."""
    reason = _reason(reason)
    with transaction.atomic():
        _, op = _locked(op_id)
        _offer(op, APPROVE)
        _require(actor, policy_for(op).approve_permission)
        _approve(op, actor=actor, reason=reason)
    transaction.on_commit(lambda: failpoints.hit("after_approval"))
    return op


# --- a person's recovery actions ----------------------------------------------------------------


def reconcile_now(op_id, *, actor, reason) -> Operation:
    reason = _reason(reason)
    _require(actor, PERMISSIONS[RECONCILE])
    with transaction.atomic():
        _, op = _locked(op_id)
        _offer(op, RECONCILE)
        journal.record(op, "recovery.operation.reconcile_requested", actor=actor, reason=reason)
        op.attention = ""
        op.lease_owner = ""
        op.lease_expires_at = None
        schedule_reconcile(op, actor=actor, at=timezone.now())
        op.save()
    return op


def retry_operation(op_id, *, actor, reason) -> Operation:
    reason = _reason(reason)
    _require(actor, PERMISSIONS[RETRY])
    with transaction.atomic():
        _, op = _locked(op_id)
        _offer(op, RETRY)
        if op.integration is not None and op.integration.paused:
            raise ActionRefused(f"{op.integration} is paused; resume it first.")
        op.budget_used = 0  # a person's retry starts a fresh budget
        op.next_attempt_at = None
        op.retry(actor=actor, reason=reason, evidence={"idempotency_key": op.idempotency_key})
        op.save()
        enqueue(op, EXECUTE)
    return op


def complete_by_hand(op_id, *, actor, reason, external_id) -> Operation:
    reason = _reason(reason)
    external_id = (external_id or "").strip()
    if not external_id:
        raise ActionRefused("The destination's reference for the record is required.")
    _require(actor, PERMISSIONS[COMPLETE])
    with transaction.atomic():
        enquiry, op = _locked(op_id)
        _offer(op, COMPLETE)
        op.external_id = external_id
        op.result = {**op.result, "completed_by_hand": True}
        op.next_attempt_at = None
        op.lease_owner = ""
        op.lease_expires_at = None
        op.confirm(actor=actor, reason=reason, evidence={"external_id": external_id})
        op.save()
        if op.action == "crm.create_enquiry" and enquiry.state in (
            EnquiryState.APPROVED,
            EnquiryState.SUBMITTED,
            EnquiryState.SUBMISSION_UNKNOWN,
        ):
            enquiry.confirm(
                actor=actor,
                reason=reason,
                evidence={"operation": str(op.pk), "external_id": external_id, "by_hand": True},
            )
            enquiry.save()
    return op


def cancel_operation(op_id, *, actor, reason) -> Operation:
    """Stop an operation for good. The CRM write of an approved enquiry ends the enquiry too
    (withdrawn: Rejected, not delivered), so that needs a reviewer's permission
    (ledger.models.cancel_permission), checked under the lock."""
    reason = _reason(reason)
    with transaction.atomic():
        enquiry, op = _locked(op_id)
        _offer(op, CANCEL)
        ends = op.ends_enquiry()
        _require(actor, cancel_permission(op))
        op.held = False
        op.next_attempt_at = None
        op.cancel(actor=actor, reason=reason, evidence={"ends_enquiry": ends})
        op.save()
        if ends:
            # The approved revision will not be delivered: nothing reached the CRM.
            enquiry.withdraw(
                actor=actor,
                reason=reason,
                evidence={"operation": str(op.pk), "outcome": "delivery cancelled"},
            )
            enquiry.save()
    return op


def compensate(op_id, *, actor, reason) -> Operation:
    """A confirmed write is never deleted: propose its compensation (crm.close_enquiry)."""
    reason = _reason(reason)
    _require(actor, PERMISSIONS[COMPENSATE])
    with transaction.atomic():
        enquiry, op = _locked(op_id)
        _offer(op, COMPENSATE)
        policy = policy_for(op)
        earlier = Operation.objects.filter(compensates=op).count()
        payload = {"external_id": op.external_id, "reason": reason, "reference": enquiry.reference}
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
        journal.record(
            compensation,
            "recovery.operation.compensation_proposed",
            actor=actor,
            reason=reason,
            evidence={"compensates": str(op.pk), "external_id": op.external_id},
            to_state=Op.PROPOSED,
        )
    return compensation


def reassign_operation(op_id, *, actor, reason, owner) -> Operation:
    reason = _reason(reason)
    _require(actor, PERMISSIONS[REASSIGN])
    with transaction.atomic():
        _, op = _locked(op_id)
        _offer(op, REASSIGN)
        previous = op.owner
        op.owner = owner
        op.save(update_fields=["owner", "updated_at"])
        journal.record(
            op,
            "recovery.operation.reassigned",
            actor=actor,
            reason=reason,
            evidence={
                "from": previous.get_username() if previous else None,
                "to": owner.get_username() if owner else None,
            },
        )
    return op


# --- configuration ------------------------------------------------------------------------------


def _shown(row, name):
    """A field's value for the journal: a person by username, never a secret's value."""
    value = getattr(row, name)
    if isinstance(value, AbstractBaseUser):
        return value.get_username()
    return value


def configure_integration(name, *, actor, reason, changes: dict) -> Integration:
    """Change an integration's settings (``changes``: field -> new value, fields of
    Integration.CONFIGURABLE only), validated as a whole, journalled field by field with the
    value before and after; a secret is journalled as "changed", never its value."""
    reason = _reason(reason)
    _require(actor, "ledger.change_integration")
    unknown = set(changes) - set(Integration.CONFIGURABLE)
    if unknown:
        raise ActionRefused(f"Not configurable here: {', '.join(sorted(unknown))}.")
    with transaction.atomic():
        row = Integration.objects.select_for_update().get(name=name)
        diff = {}
        for field, value in changes.items():
            before = _shown(row, field)
            setattr(row, field, value)
            after = _shown(row, field)
            if before == after:
                continue
            if field in Integration.SECRET_FIELDS:
                diff[field] = "removed" if not after else ("set" if not before else "changed")
            else:
                diff[field] = {"from": before, "to": after}
        if not diff:
            raise ActionRefused(f"Nothing changed: {row}'s settings are as they were.")
        row.full_clean()  # ValidationError: the view shows it on the field
        row.save(update_fields=[*diff])
        journal.record(
            row, "ledger.integration.configured", actor=actor, reason=reason, evidence=diff
        )
    return row


# --- pause, resume, backlog ---------------------------------------------------------------------


def backlog(name):
    """Work held while the integration was paused, oldest first: what an admin reviews."""
    return (
        Operation.objects.filter(integration__name=name, state=Op.APPROVED, held=True)
        .select_related("enquiry")
        .order_by("created_at")
    )


def pause_integration(name, *, actor, reason) -> Integration:
    reason = _reason(reason)
    _require(actor, "ledger.pause_integration")
    with transaction.atomic():
        row = Integration.objects.select_for_update().get(name=name)
        if row.paused:
            raise ActionRefused(f"{row} is already paused.")
        row.paused = True
        row.paused_at = timezone.now()
        row.paused_by = actor if isinstance(actor, AbstractBaseUser) else None
        row.pause_reason = reason
        row.save()
        held = Operation.objects.filter(integration=row, state=Op.APPROVED, held=False).update(
            held=True
        )
        journal.record(
            row, "ledger.integration.paused", actor=actor, reason=reason, evidence={"held": held}
        )
    return row


def resume_integration(name, *, actor, reason) -> Integration:
    """Unpause. The backlog stays held until an admin releases it (release_backlog)."""
    reason = _reason(reason)
    _require(actor, "ledger.pause_integration")
    with transaction.atomic():
        row = Integration.objects.select_for_update().get(name=name)
        if not row.paused:
            raise ActionRefused(f"{row} is not paused.")
        waiting = backlog(name).count()
        row.paused = False
        row.awaiting_backlog_review = waiting > 0
        row.save()
        journal.record(
            row,
            "ledger.integration.resumed",
            actor=actor,
            reason=reason,
            evidence={"backlog": waiting},
        )
    return row


def release_backlog(name, *, actor, reason, operation_ids=None) -> list[Operation]:
    """Release all of the reviewed backlog, or the chosen operations, with a reason."""
    reason = _reason(reason)
    _require(actor, "ledger.pause_integration")
    released = []
    with transaction.atomic():
        row = Integration.objects.select_for_update().get(name=name)
        if row.paused:
            raise ActionRefused(f"{row} is paused; resume it before releasing its backlog.")
        chosen = backlog(name)
        if operation_ids is not None:
            chosen = chosen.filter(pk__in=list(operation_ids))
        for op_id in list(chosen.values_list("pk", flat=True)):
            _, op = lock_operation(op_id)
            if op is None or op.state != Op.APPROVED or not op.held:
                continue
            op.held = False
            op.save(update_fields=["held", "updated_at"])
            journal.record(op, "ledger.operation.released", actor=actor, reason=reason)
            enqueue(op, EXECUTE)
            released.append(op)
        row.awaiting_backlog_review = backlog(name).exists()
        row.save(update_fields=["awaiting_backlog_review"])
        journal.record(
            row,
            "ledger.integration.backlog_released",
            actor=actor,
            reason=reason,
            evidence={"released": [str(op.pk) for op in released]},
        )
    return released


# --- appointments -------------------------------------------------------------------------------


def request_appointment_slots(enquiry_id, *, actor, day) -> Operation:
    """A reviewer needs slots: a system-approved read, run by a worker. A stale earlier read of
    the same day is read again (a new operation; the old one keeps what it saw)."""
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id)
        day = str(day)
        earlier = Operation.objects.filter(
            enquiry=enquiry, action="appointments.read", payload__date=day
        ).count()
        op, _ = propose(
            enquiry,
            "appointments.read",
            {"date": day},
            revision=enquiry.current_revision,
            detail=f"{day}#{earlier + 1}",
            actor=actor,
            approve=True,
            reason=f"slots for {day}",
        )
    return op


def appointment_slots(enquiry_id, day) -> dict:
    """The latest read for that day and whether it is still fresh; stale data says so."""
    from datetime import datetime, timedelta

    op = (
        Operation.objects.filter(
            enquiry_id=enquiry_id, action="appointments.read", payload__date=str(day)
        )
        .order_by("-created_at")
        .first()
    )
    if op is None:
        return {"operation": None, "slots": [], "as_of": None, "fresh": False, "state": "none"}
    result = op.result or {}
    fresh = False
    if op.state == Op.CONFIRMED and result.get("as_of"):
        as_of = datetime.fromisoformat(result["as_of"])
        max_age = timedelta(seconds=float(result.get("max_age_seconds") or 0))
        fresh = timezone.now() <= as_of + max_age
    return {
        "operation": op,
        "slots": result.get("slots", []),
        "as_of": result.get("as_of"),
        "fresh": fresh,
        "state": op.state,
    }
