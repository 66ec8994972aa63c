"""Reconciling an `unknown` operation: look it up holding no lock, then record what was found
and act on it (docs/integrations.md, "How an outcome is read")."""

from __future__ import annotations

import enum
import logging
from datetime import timedelta

from django.utils import timezone

from ledger import journal, limits, storable
from ledger.connectors.base import CallResult, ConnectorError, ErrorKind, LookupResult
from ledger.execution.locking import lock_operation, read_operation, save_changed, step
from ledger.execution.outcomes import (
    clear_lease,
    come_back,
    confirm_operation,
    fail_operation,
    finish_attempt,
    needs_person,
    schedule_reconcile,
    throttled_in_a_row,
    wait_until,
)
from ledger.models import Attempt, OperationState
from ledger.policies import connector_for, policy_for, retry_budget
from ledger.queueing import EXECUTE, RECONCILE, enqueue
from ledger.worker import worker_actor

logger = logging.getLogger("ledger.execution")

SECOND_LOOK_MIN_SECONDS = 1.0


class Lookup(enum.StrEnum):
    """What reconciling an operation came to: the word its task logs. A StrEnum, so the log
    reads as it always did."""

    NOTHING_TO_CLAIM = "nothing to claim"  # no longer `unknown` (or no such operation)
    NOT_ITS_TURN = "not its turn"  # its integration's rate limit: queued again, not looked up
    SUPERSEDED = "superseded"  # the operation moved on while it was looked up
    THROTTLED = "throttled"  # the destination asked us to wait: looked up again then
    LOOKUP_FAILED = "lookup failed"  # a person must look
    LOOKUP_UNAVAILABLE = "lookup unavailable"  # a person must look
    FAILED_DELIVERY = "failed (delivery)"  # found, and the destination says it failed
    CONFIRMED = "confirmed"  # found once
    DUPLICATES = "duplicates"  # found more than once: a person must look
    FAILED_BUDGET = "failed (budget)"  # not found, and no retry left
    RETRYING = "retrying"  # not found (or a read): sent again with the same key
    SETTLING = "not found yet (settling)"  # looked again after the settle delay
    FIRST_LOOK = "not found (first look)"  # no idempotency key: looked at once more first


def settled_at(op):
    """When a lookup's "not found" can be believed: the settle delay after the last call."""
    last_call = op.attempts.filter(kind="call").order_by("-number").first()
    reference = op.state_changed_at
    if last_call is not None:
        reference = last_call.ended_at or max(last_call.started_at, op.state_changed_at)
    delay = op.integration.capabilities.settle_delay_seconds if op.integration else 0.0
    return reference + timedelta(seconds=delay)


def reconcile(op_id) -> Lookup:
    """Look an `unknown` operation up by its reference and act on what is found.

    A lookup is a read and changes nothing anywhere, so it is made first, holding no lock and
    having committed nothing; then one transaction locks the rows and records the attempt
    with what was found. Whether the operation moved on meanwhile (another reconcile, a
    person's action) is checked there: it must still be `unknown` with no attempt recorded
    since it was read, or the lookup is recorded as `superseded` and nothing else changes.
    A worker that dies mid-lookup leaves its task unacknowledged: the broker hands it out
    again (django-q2's retry), and the sweeper leaves an operation with a live task alone.
    """
    started = timezone.now()
    actor = worker_actor()
    op = read_operation(op_id, state=OperationState.UNKNOWN)
    if op is None:
        return Lookup.NOTHING_TO_CLAIM
    if limits.applies(op.integration, started):
        later = limits.admission(op.integration, now=started)
        if later is not None:
            with step():
                _, locked = lock_operation(op.pk, skip_locked=True, state=OperationState.UNKNOWN)
                if locked is not None and locked.attempt_count == op.attempt_count:
                    come_back(locked, RECONCILE, later.at)
            return Lookup.NOT_ITS_TURN
    scope = limits.Scope(op)
    try:
        connector = connector_for(op)
        try:
            with limits.using(scope):
                found = connector.lookup(op)
            error = None
        except ConnectorError as exc:
            found, error = None, exc
        except Exception as exc:
            # Ours, not the destination's answer: the look-up settled nothing.
            logger.exception("error inside Handover during the look-up for %s", op.pk)
            found, error = (
                None,
                ConnectorError(
                    ErrorKind.UNCERTAIN,
                    f"error inside Handover during the look-up ({type(exc).__name__}: {exc})"[:600],
                ),
            )
            error.internal = True
        return record_lookup(
            op.pk, found, error, actor=actor, started=started, seen_attempts=op.attempt_count
        )
    finally:
        scope.release()


def _ref(op):
    return op.payload.get("reference") or op.payload.get("external_id") or op.idempotency_key


def record_lookup(
    op_id, found: LookupResult | None, error, *, actor, started, seen_attempts
) -> Lookup:
    """Record a lookup made at ``started`` of the operation as read with ``seen_attempts``
    attempts, and act on what it found (docs/integrations.md, "How an outcome is read")."""
    with step():
        enquiry, op = lock_operation(op_id)
        if op is None:
            return Lookup.NOTHING_TO_CLAIM
        attempt = Attempt(
            operation=op,
            number=op.attempt_count + 1,
            kind="lookup",
            worker=actor,
            started_at=started,
            request_summary={"lookup": policy_for(op).check_first, "reference": _ref(op)},
        )
        moved_on = op.state != OperationState.UNKNOWN or op.attempt_count != seen_attempts
        op.attempt_count = attempt.number
        op.last_attempted_at = started
        if moved_on:
            finish_attempt(attempt, outcome="superseded", error=error)
            save_changed(op)
            return Lookup.SUPERSEDED
        clear_lease(op)
        policy = policy_for(op)
        if error is not None and error.retry_after is not None:
            # Asked to wait: look again after the destination's time; no person needed.
            finish_attempt(
                attempt, outcome="throttled", status=error.status, body=error.body, error=error
            )
            op.last_error_class = "throttled"
            op.last_error_message = f"lookup: {error.message}"[:2000]
            until = wait_until(op, error, actor)
            in_a_row = throttled_in_a_row(op) if error.status is not None else 0
            if in_a_row >= limits.max_throttled_in_a_row():
                needs_person(
                    op,
                    actor,
                    "throttled_too_often",
                    f"the look-up was answered {error.status} (wait) {in_a_row} times in a row",
                )
                return Lookup.THROTTLED
            schedule_reconcile(op, actor=actor, at=until)
            return Lookup.THROTTLED
        if error is not None:
            finish_attempt(
                attempt, outcome="lookup_failed", status=error.status, body=error.body, error=error
            )
            internal = getattr(error, "internal", False)
            op.last_error_class = "internal" if internal else error.kind.value
            op.last_error_message = f"lookup: {error.message}"[:2000]
            op.last_error_status = storable.status(error.status)
            needs_person(op, actor, "lookup_failed", f"lookup failed: {error.message[:300]}")
            return Lookup.LOOKUP_FAILED
        if not found.supported:
            finish_attempt(attempt, outcome="lookup_unavailable", status=found.status)
            needs_person(op, actor, "lookup_unavailable", "the destination cannot be looked up")
            return Lookup.LOOKUP_UNAVAILABLE
        ids = found.external_ids
        evidence = {"found": ids, "attempt": attempt.number}
        if found.failed:
            finish_attempt(attempt, outcome="found_failed", status=found.status, body=found.body)
            fail_operation(op, enquiry, actor, "delivery_failed", found.failed)
            return Lookup.FAILED_DELIVERY
        if len(ids) == 1:
            finish_attempt(attempt, outcome="found", status=found.status, body=found.body)
            result = CallResult(found.status, ids[0], found.body, {"reconciled": True})
            confirm_operation(op, enquiry, result, actor, f"found at the destination: {ids[0]}")
            return Lookup.CONFIRMED
        if len(ids) > 1:
            finish_attempt(attempt, outcome="duplicates", status=found.status, body=found.body)
            op.result = {**op.result, "duplicates": ids}
            needs_person(op, actor, "duplicate_records", f"{len(ids)} records carry this reference")
            journal.record(
                op,
                "ledger.operation.duplicate_detected",
                actor=actor,
                reason=f"{len(ids)} records for {_ref(op)}",
                evidence=evidence,
            )
            return Lookup.DUPLICATES
        # Not found.
        if found.repeatable or not policy.is_write:
            finish_attempt(attempt, outcome="repeatable", status=found.status)
            return _retry_after_lookup(op, enquiry, actor, "a read: safe to do again")
        settle = settled_at(op)
        if attempt.started_at < settle:
            finish_attempt(attempt, outcome="not_found_unsettled", status=found.status)
            schedule_reconcile(op, actor=actor, at=settle)
            return Lookup.SETTLING
        if op.integration is not None and not op.integration.capabilities.idempotency_key:
            last_call = op.attempts.filter(kind="call").order_by("-number").first()
            earlier = op.attempts.filter(
                kind="lookup",
                outcome="not_found_first_look",
                number__gt=last_call.number if last_call else 0,
            )
            if not earlier.exists():
                finish_attempt(attempt, outcome="not_found_first_look", status=found.status)
                gap = max(op.integration.capabilities.settle_delay_seconds, SECOND_LOOK_MIN_SECONDS)
                schedule_reconcile(op, actor=actor, at=timezone.now() + timedelta(seconds=gap))
                return Lookup.FIRST_LOOK
        finish_attempt(attempt, outcome="not_found", status=found.status)
        return _retry_after_lookup(op, enquiry, actor, "not found at the destination")


def _retry_after_lookup(op, enquiry, actor, why) -> Lookup:
    budget, _backoff = retry_budget(op)
    if op.budget_used >= budget:
        fail_operation(op, enquiry, actor, "retry_budget_exhausted", why)
        return Lookup.FAILED_BUDGET
    op.next_attempt_at = None
    op.retry(
        actor=actor,
        reason=f"{why}; retrying with the same key",
        evidence={"idempotency_key": op.idempotency_key},
    )
    save_changed(op)
    enqueue(op, EXECUTE)
    return Lookup.RETRYING
