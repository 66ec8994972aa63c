"""Operations in any state, walked there through their real transitions (journalled)."""

from django.db import transaction

from ledger.models import Operation, payload_hash

SYSTEM = "system:factory"

# How to reach each operation state from "proposed".
OP_PATHS = {
    "proposed": [],
    "cancelled": ["cancel"],
    "approved": ["approve"],
    "submitted": ["approve", "submit"],
    "confirmed": ["approve", "submit", "confirm"],
    "failed": ["approve", "submit", "fail"],
    "unknown": ["approve", "submit", "mark_unknown"],
}


def make_operation(
    enquiry, state="proposed", *, action="crm.create_enquiry", integration=None, payload=None
):
    """An operation for revision 1 of ``enquiry``, walked to ``state``."""
    payload = payload if payload is not None else {"reference": enquiry.reference}
    op = Operation.objects.create(
        enquiry=enquiry,
        action=action,
        revision=1,
        idempotency_key=Operation.make_key(enquiry.pk, action, 1),
        payload=payload,
        payload_hash=payload_hash(payload),
        integration=integration,
    )
    with transaction.atomic():
        for step in OP_PATHS[state]:
            getattr(op, step)(actor=SYSTEM, reason=f"factory: {step}")
        op.save()
    return op
