"""Recording what happened to an operation, shared by executing and reconciling: the
attempt's ending, and the operation confirmed, failed, unknown, held, waiting for its turn or
for a person."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from config import roundtrip
from ledger import effects, journal, limits, storable
from ledger.connectors.base import CallResult, ConnectorError
from ledger.execution.locking import save_changed
from ledger.policies import policy_for
from ledger.queueing import RECONCILE, enqueue

BODY_LIMIT = 2000


def clear_lease(op):
    op.lease_owner = ""
    op.lease_expires_at = None


def finish_attempt(attempt, *, outcome, status=None, body="", error=None):
    """Write the attempt's ending: only these fields, so nothing else in the row is touched."""
    fields = {
        "ended_at": timezone.now(),
        "outcome": outcome,
        "response_status": storable.status(status),
        # Cleaned here too: every attempt record passes through this one function.
        "response_body": storable.text(body, BODY_LIMIT),
    }
    if error is not None:
        internal = getattr(error, "internal", False)
        fields["error_class"] = "internal" if internal else error.kind.value
        fields["error_message"] = storable.text(error.message, 2000)
    for name, value in fields.items():
        setattr(attempt, name, value)
    if attempt._state.adding:
        roundtrip.insert([attempt])  # a lookup's attempt, recorded whole with what was found
        return
    roundtrip.update(attempt, fields)


def come_back(op, func, at):
    """Not this operation's turn at its integration: queued again for ``at``. Nothing else
    changes (no attempt, no transition, no retry budget), so it is not journalled."""
    op.next_attempt_at = at
    save_changed(op)
    enqueue(op, func, at=at)


def hold(op, *, actor, reason):
    op.held = True
    save_changed(op)
    journal.record(op, "ledger.operation.held", actor=actor, reason=reason)


def confirm_operation(op, enquiry, result: CallResult, actor, reason):
    op.external_id = result.external_id or op.external_id
    op.result = {**op.result, **result.result}
    op.last_error_class = ""
    op.last_error_message = ""
    op.last_error_status = None
    op.next_attempt_at = None
    clear_lease(op)
    op.confirm(
        actor=actor,
        reason=reason,
        evidence={"external_id": op.external_id, "status": result.status},
    )
    save_changed(op)
    effects.on_success(op, result, enquiry=enquiry, actor=actor)


def wait_until(op, error: ConnectorError, actor):
    """When the operation may be tried again after ``error`` asked it to wait: the
    destination's own answer (a status with Retry-After) throttles the whole integration,
    journalled; our own limiter's "no turn in time" (no status) waits for this operation only."""
    until = timezone.now() + timedelta(seconds=error.retry_after)
    if op.integration is not None and error.status is not None:
        until = limits.throttle(
            op.integration,
            seconds=error.retry_after,
            reason=f"{error.status}: asked to wait {error.retry_after:g}s",
            actor=actor,
            evidence={"operation": str(op.pk), "status": error.status},
        )
    return until


def throttled_in_a_row(op) -> int:
    """The destination's throttled answers to this operation's latest attempts, in a row."""
    count = 0
    for outcome in op.attempts.order_by("-number").values_list("outcome", flat=True)[:200]:
        if outcome != "throttled":
            break
        count += 1
    return count


def fail_operation(op, enquiry, actor, attention, message):
    """`failed` for good: a person must act. Who is the response policy's business (the owner
    of the "Operation failed" queue, recovery.ownership), not the integration's owner: the
    operation keeps the owner a person gave it, and gets none from here."""
    op.attention = attention
    op.next_attempt_at = None
    clear_lease(op)
    op.fail(
        actor=actor,
        reason=f"{attention}: {message}"[:1000],
        evidence={"attention": attention, "owner_id": op.owner_id},
    )
    save_changed(op)
    effects.on_failed(op, enquiry=enquiry, actor=actor, attention=attention, message=message)


def to_unknown(op, enquiry, actor, reason, evidence=None):
    """`unknown`, then reconcile: after the settle delay, or a person when lookup is off."""
    clear_lease(op)
    op.mark_unknown(actor=actor, reason=reason, evidence=evidence or {})
    schedule_reconcile(op, actor=actor)
    save_changed(op)
    effects.on_unknown(op, enquiry=enquiry, actor=actor, reason=reason)


def schedule_reconcile(op, *, actor, at=None):
    """Queue the lookup (when the destination can be asked); otherwise a person's queue.

    Without ``at`` the first look is made at once: a record that is there can be believed
    whenever it is seen, and only "not found" has to wait for the settle delay (record_lookup
    schedules the next look at settled_at). Waiting first would keep a CRM with a long settle
    delay (BottleCRM's 30 s) in the queue that long even when the record is there.
    """
    policy = policy_for(op)
    integration = op.integration
    if policy.is_write and integration is not None and not integration.capabilities.lookup:
        needs_person(op, actor, "lookup_unavailable", f"{integration} cannot be looked up")
        return
    op.next_attempt_at = at
    save_changed(op)
    enqueue(op, RECONCILE, at=at)


def needs_person(op, actor, attention, reason):
    op.attention = attention
    op.next_attempt_at = None
    # Routed by the response policy of its queue (recovery.ownership), like fail_operation.
    save_changed(op)
    journal.record(
        op,
        "ledger.operation.needs_person",
        actor=actor,
        reason=reason,
        evidence={"attention": attention},
        from_state=op.state,
        to_state=op.state,
    )
