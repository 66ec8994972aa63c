"""Which queue an item is in, and which response policy (owner, period) applies to it.

The queue page computes the same in SQL (recovery.queue.Policies, a CASE built once per page);
this is the Python side for one item at a time: the item page and the escalation task.
"""

from __future__ import annotations

from django.db.models import Case, F, Q, Value, When

from intake.models import EnquiryState
from ledger.models import Op
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
    if enquiry.state in (EnquiryState.NEEDS_INFORMATION, EnquiryState.SUBMISSION_UNKNOWN):
        return enquiry.state
    if enquiry.state == EnquiryState.READY_FOR_REVIEW:
        return Queue.UNRESOLVED if enquiry.category_id is None else Queue.REVIEW
    return None


def due(since, policy):
    return since + policy.response_period if policy and since else None
