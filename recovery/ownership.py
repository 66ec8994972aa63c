"""Which queue an item is in, and which response policy (owner, period) applies to it.

The queue computes the same once per branch of its SQL (recovery.queue.policies.Policies); this
is the Python side for one item at a time: the item page and the escalation task.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, F, Q, Value, When

from intake.models import EnquiryState
from ledger.models import Op
from ledger.receipt import FAILURES_FOR_A_PERSON
from recovery.models import Queue, ResponsePolicy


def policy_for(queue: str, integration_id=None) -> ResponsePolicy | None:
    return (
        ResponsePolicy.objects.filter(
            Q(queue=queue) | Q(queue=""),
            Q(integration_id=integration_id) | Q(integration__isnull=True),
        )
        .select_related("owner", "backup_owner")
        .order_by(
            Case(When(queue="", then=Value(1)), default=Value(0)),
            F("integration_id").asc(nulls_last=True),
        )
        .first()
    )


def operation_queue(op) -> str | None:
    return op.state if op.state in (Op.UNKNOWN, Op.FAILED) else None


def enquiry_queue(enquiry) -> str | None:
    if enquiry.receipt_pending and enquiry.receipt_failures >= FAILURES_FOR_A_PERSON:
        return Queue.RECEIPT_FAILING
    if enquiry.state in (EnquiryState.NEEDS_INFORMATION, EnquiryState.SUBMISSION_UNKNOWN):
        return enquiry.state
    if enquiry.state == EnquiryState.READY_FOR_REVIEW:
        return Queue.UNRESOLVED if enquiry.category_id is None else Queue.REVIEW
    return None


def due(since, policy):
    return since + policy.response_period if policy and since else None


@dataclass
class Owner:
    """Who owns an item now, and why: directly, through the queue's policy, or escalated."""

    user: object
    why: str


HANDOVER_ACTIONS = (
    "recovery.operation.reassigned",
    "intake.enquiry.assigned",
    "recovery.escalated",
)


def owner_why(direct: bool, journal=()) -> str:
    """Why the owner owns it: "owns this queue", "assigned by casey at ...", or "escalated
    from coordinator at ..., overdue" (from the latest hand-over in ``journal``)."""
    from recovery import timefmt

    if not direct:
        return "owns this queue"
    given = next((r for r in reversed(list(journal)) if r.action in HANDOVER_ACTIONS), None)
    if given is None:
        return "assigned"
    at = timefmt.local(given.at)
    if given.actor.startswith("system:") and "overdue" in (given.reason or ""):
        earlier = (given.evidence or {}).get("from") or "the queue's owner"
        return f"escalated from {earlier} at {at}, overdue"
    return f"assigned by {given.actor.removeprefix('user:')} at {at}"


def effective_owner(owner, policy, journal=()) -> Owner:
    """The one owner the queue row, the card and the item page all show: the person the item
    was given to (by hand or by escalation), else the owner of the queue it is in."""
    if owner is not None:
        return Owner(owner, owner_why(True, journal))
    if policy is not None and policy.owner_id:
        return Owner(policy.owner, owner_why(False))
    return Owner(None, "")


def latest_handovers(subjects) -> dict:
    """(subject_type, subject_id) -> its latest hand-over journal row, in one query (the queue
    page shows why each owner owns its row without a query per row)."""
    from ledger.models import JournalEntry

    subjects = list(subjects)
    if not subjects:
        return {}
    condition = Q()
    for subject_type, subject_id in subjects:
        condition |= Q(subject_type=subject_type, subject_id=subject_id)
    rows = (
        JournalEntry.objects.filter(condition, action__in=HANDOVER_ACTIONS)
        .order_by("subject_type", "subject_id", "-at", "-id")
        .distinct("subject_type", "subject_id")
    )
    return {(r.subject_type, r.subject_id): r for r in rows}
