"""What followed the latest "Reconcile now" on an operation, from its journal and attempts."""

from __future__ import annotations

from dataclasses import dataclass

from ledger.models import OperationState
from recovery import timefmt
from recovery.words import outcome_label


@dataclass
class ReconcileStatus:
    requested_at: object
    requested_by: str
    pending: bool
    steps: list[str]


def reconcile_status(op, journal) -> ReconcileStatus | None:
    """The latest "Reconcile now" on ``op`` and what followed it, from its journal and attempts:
    pending until a look-up (and any write it led to) has an outcome."""
    request = next(
        (r for r in reversed(journal) if r.action == "recovery.operation.reconcile_requested"),
        None,
    )
    if request is None:
        return None
    steps = []
    for attempt in op.attempts.all():
        if attempt.started_at < request.at:
            continue
        at = timefmt.local(attempt.started_at, date=False)
        status = f" (HTTP {attempt.response_status})" if attempt.response_status else ""
        if attempt.kind == "lookup":
            steps.append(f"{at}: look-up: {outcome_label(attempt.outcome)}{status}")
        elif attempt.ended_at is None:
            steps.append(f"{at}: sent again with the same idempotency key: no answer yet")
        else:
            steps.append(
                f"{at}: sent again with the same idempotency key: "
                f"{outcome_label(attempt.outcome)}{status}"
            )
    pending = (op.state == OperationState.UNKNOWN and not op.attention) or op.state in (
        OperationState.APPROVED,
        OperationState.SUBMITTED,
    )
    return ReconcileStatus(
        requested_at=request.at,
        requested_by=request.actor.removeprefix("user:"),
        pending=pending,
        steps=steps,
    )
