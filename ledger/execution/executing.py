"""Executing an approved operation: claim it, call the destination holding no lock, record
the outcome (the table in ledger.execution's docstring)."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from config import roundtrip
from ledger import effects, failpoints, http, journal, limits, reads, storable, wording
from ledger.connectors.base import CallResult, ConnectorError, ErrorKind
from ledger.execution import retrying
from ledger.execution.locking import lock_operation, save_changed, step
from ledger.execution.outcomes import (
    clear_lease,
    come_back,
    confirm_operation,
    fail_operation,
    finish_attempt,
    hold,
    needs_person,
    throttled_in_a_row,
    to_unknown,
    wait_until,
)
from ledger.models import Action, Attempt, OperationState, payload_hash
from ledger.policies import POLICIES, connector_for, policy_for
from ledger.queueing import EXECUTE, enqueue
from ledger.worker import worker_actor, worker_name

logger = logging.getLogger("ledger.execution")

LEASE_GRACE_SECONDS = 5
# Reads from a destination: each takes a place in reads' share of the workers (ledger.reads).
READS = tuple(sorted(a for a, p in POLICIES.items() if not p.is_write and p.integration))


def lease_seconds() -> float:
    # No call can outlive the cluster's timeout: the guard kills the worker first.
    return float(settings.Q_CLUSTER.get("timeout") or 60) + LEASE_GRACE_SECONDS


def execute(op_id) -> str:
    """Run one approved operation. Returns a word for the log: what happened."""
    claimed = claim(op_id)
    if claimed is None:
        return "nothing to claim"
    op, attempt, shortcut = claimed
    scope = limits.Scope(op)
    try:
        return _call(op, attempt, shortcut, scope)
    finally:
        # Only once the outcome is recorded: a throttle a 429 set is in place before the
        # in-flight slot lets anyone else send.
        scope.release()


def _call(op, attempt, shortcut, scope) -> str:
    actor = worker_actor()
    if shortcut is not None:
        return record_success(op.pk, attempt, shortcut, actor=actor, outcome="skipped")
    started = http.requests_started()
    try:
        connector = connector_for(op)
        with limits.using(scope), failpoints.operation(op):
            result = connector.call(op)
    except ConnectorError as exc:
        return record_failure(op.pk, attempt, exc, actor=actor)
    except Exception as exc:
        # A crash inside Handover's own code, never the destination's answer. Before any
        # request went out nothing was sent: internal, for a person. After one went out the
        # destination may have acted: uncertain, reconciled, and still said to be ours. A
        # read changed nothing wherever it failed: internal, told once, never retried as if
        # the destination might have acted.
        logger.exception("error inside Handover while calling for %s", op.pk)
        sent = http.requests_started() != started
        return record_failure(
            op.pk,
            attempt,
            internal_error(exc, sent=sent, read=not policy_for(op.action).is_write),
            actor=actor,
        )
    failpoints.hit("after_call_succeeded", op)
    return record_success(op.pk, attempt, result, actor=actor)


def internal_error(exc, *, sent: bool, read: bool = False) -> ConnectorError:
    what = f"{type(exc).__name__}: {exc}"[:500]
    if not sent:
        return ConnectorError(
            ErrorKind.INTERNAL, f"error inside Handover before anything was sent ({what})"
        )
    if read:
        return ConnectorError(
            ErrorKind.INTERNAL,
            f"error inside Handover while reading what the destination answered ({what}); a "
            "read changes nothing at the destination",
        )
    error = ConnectorError(
        ErrorKind.UNCERTAIN,
        f"error inside Handover after the request was sent ({what}); the destination may "
        "have acted",
    )
    error.internal = True
    return error


def claim(op_id):
    """(operation, attempt, shortcut) committed as `submitted`, or None when not claimable.
    An operation whose integration's turn is not near (ledger.limits.admission) is put back
    on the queue for its turn, unchanged."""
    now = timezone.now()
    actor = worker_actor()
    with step():
        enquiry, op = lock_operation(
            op_id,
            skip_locked=True,
            with_integration=True,
            state=OperationState.APPROVED,
            held=False,
        )
        if op is None:
            return None
        if op.next_attempt_at and op.next_attempt_at > now:
            return None  # a delayed task (or the sweeper) brings it back when due
        integration = op.integration
        if integration is not None and integration.paused:
            hold(op, actor=actor, reason=f"{integration} is paused")
            return None
        if op.action == Action.CREATE_ENQUIRY and enquiry.approved_revision != op.revision:
            op.cancel(
                actor=actor,
                reason=f"the approval of revision {op.revision} no longer stands",
                evidence={"approved_revision": enquiry.approved_revision},
            )
            save_changed(op)
            return None
        if op.action == Action.SEND_NOTICE and (passed := wording.moment_passed(op, enquiry)):
            # A message to a resident says only what is true when it is sent: one whose moment
            # has passed (an acknowledgement after approval) is cancelled, never sent.
            op.cancel(
                actor=actor,
                reason=f"not sent: {passed}",
                evidence={"template": op.payload.get("template"), "enquiry_state": enquiry.state},
            )
            save_changed(op)
            return None
        number = op.attempt_count + 1
        connector = connector_for(op)
        attempt = Attempt(
            operation=op,
            number=number,
            kind="call",
            worker=actor,
            started_at=now,
            request_summary=connector.request_summary(op),
        )
        if payload_hash(op.payload) != op.payload_hash:
            # As a payment API refuses a reused key with other parameters: never sent.
            attempt.outcome = "refused"
            attempt.error_class = "invalid"
            attempt.error_message = "payload differs from the approved payload"
            attempt.ended_at = now
            roundtrip.insert([attempt])
            op.attempt_count = number
            op.last_attempted_at = now
            fail_operation(op, enquiry, actor, "payload_mismatch", attempt.error_message)
            save_changed(op)
            return None
        if limits.applies(integration, now):
            later = limits.admission(integration, now=now)
            if later is not None:
                come_back(op, EXECUTE, later.at)
                return None
        if op.action in READS:
            # Reads' share of the workers, and one enquiry's reads taking turns (ledger.reads).
            wait = reads.admission(op, actions=READS, now=now)
            if wait is not None:
                come_back(op, EXECUTE, wait.at)
                return None
        roundtrip.insert([attempt])
        op.attempt_count = number
        op.last_attempted_at = now
        op.budget_used += 1
        op.lease_owner = worker_name()
        op.lease_expires_at = now + timedelta(seconds=lease_seconds())
        op.next_attempt_at = None
        op.submit(actor=actor, reason=f"attempt {number}", evidence={"attempt": number})
        save_changed(op)
        if op.action == Action.CREATE_ENQUIRY and enquiry.state == "approved":
            enquiry.submit(
                actor=actor,
                reason=f"sending revision {op.revision} to the CRM",
                evidence={"operation": str(op.pk), "attempt": number},
            )
            save_changed(enquiry)
    shortcut = effects.already_done(op)
    return op, attempt, shortcut


def record_success(op_id, attempt, result: CallResult, *, actor, outcome="success") -> str:
    """``attempt``: the Attempt this worker recorded at its claim."""
    with step():
        enquiry, op = lock_operation(op_id)
        finish_attempt(attempt, outcome=outcome, status=result.status, body=result.body)
        if op.state not in (OperationState.SUBMITTED, OperationState.UNKNOWN):
            journal.record(
                op,
                "ledger.operation.late_outcome",
                actor=actor,
                reason=f"attempt {attempt.number} succeeded after the operation became {op.state}",
                evidence={"external_id": result.external_id},
            )
            return "late success"
        confirm_operation(op, enquiry, result, actor, f"attempt {attempt.number}: {outcome}")
        return "confirmed"


def record_failure(op_id, attempt, error: ConnectorError, *, actor) -> str:
    """``attempt``: the Attempt this worker recorded at its claim."""
    with step():
        enquiry, op = lock_operation(op_id)
        throttled = error.retry_after is not None and error.kind is ErrorKind.TRANSIENT
        finish_attempt(
            attempt,
            outcome=("throttled" if error.status else "not_sent")
            if throttled
            else error.kind.value,
            status=error.status,
            body=error.body,
            error=error,
        )
        if op.state != OperationState.SUBMITTED or op.lease_owner != worker_name():
            journal.record(
                op,
                "ledger.operation.late_outcome",
                actor=actor,
                reason=f"attempt {attempt.number} ended {error.kind.value} after the operation "
                f"became {op.state}",
                evidence={"error": error.message[:500]},
            )
            return "late failure"
        op.last_error_class = "internal" if getattr(error, "internal", False) else error.kind.value
        op.last_error_message = error.message[:2000]
        op.last_error_status = storable.status(error.status)
        clear_lease(op)
        kind = error.kind
        if throttled:
            return _throttled(op, enquiry, error, actor)
        if kind is ErrorKind.TRANSIENT:
            later = retrying.next_try(op)
            if later is not None:
                op.next_attempt_at = later.at
                op.defer(
                    actor=actor,
                    reason=f"not sent ({error.message[:200]}); {later.words}",
                    evidence={"error_class": "transient", **later.evidence},
                )
                save_changed(op)
                enqueue(op, EXECUTE, at=op.next_attempt_at)
                return "retry scheduled"
            fail_operation(
                op,
                enquiry,
                actor,
                "retry_budget_exhausted",
                retrying.spent_words(op, error.message),
            )
            save_changed(op)
            return "failed (budget)"
        if kind is ErrorKind.UNCERTAIN and error.attention:
            # The destination answered, but in a way no look-up can settle: a person.
            op.result = {**op.result, **error.evidence}
            clear_lease(op)
            op.mark_unknown(actor=actor, reason=error.message[:1000], evidence=dict(error.evidence))
            needs_person(op, actor, error.attention, error.message[:1000])
            effects.on_unknown(op, enquiry=enquiry, actor=actor, reason=error.message[:500])
            return "unknown (a person must look)"
        if kind is ErrorKind.UNCERTAIN:
            to_unknown(op, enquiry, actor, f"no answer: {error.message[:300]}")
            return "unknown"
        if kind is ErrorKind.INTERNAL:
            # Nothing was sent; a retry cannot duplicate anything, but the same code would
            # fail the same way: the maintainer looks first. The retry budget is untouched.
            op.budget_used = max(op.budget_used - 1, 0)
            fail_operation(op, enquiry, actor, "internal_error", error.message)
            save_changed(op)
            return "failed (internal error)"
        if kind is ErrorKind.AUTH:
            attention = "access_denied" if op.action == Action.EXTRACT_DOCUMENT else "auth"
            fail_operation(op, enquiry, actor, attention, error.message)
            save_changed(op)
            # A document whose access was removed is that document's problem, not the
            # integration's credentials: only a real auth refusal tells the owner so.
            if op.integration is not None and attention == "auth":
                journal.record(
                    op.integration,
                    "ledger.integration.credentials_refused",
                    actor=actor,
                    reason=error.message[:500],
                    evidence={
                        "operation": str(op.pk),
                        "owner": op.integration.owner.get_username()
                        if op.integration.owner
                        else None,
                    },
                )
            return "failed (auth)"
        # An answer that settles the read for good (a changed document) says so by its code.
        op.result = {**op.result, **error.evidence}
        fail_operation(op, enquiry, actor, error.attention or "invalid", error.message)
        save_changed(op)
        return "failed (invalid)"


def _throttled(op, enquiry, error: ConnectorError, actor) -> str:
    """The destination asked us to wait: not a failure. Its integration is throttled until
    then (no worker sends to it before), and this operation comes back then, the call it just
    made not counted against its retry budget. With no status, nothing was sent: our own limit
    gave the request no turn in time (ledger.limits.before_request); it simply comes back."""
    op.budget_used = max(op.budget_used - 1, 0)
    op.last_error_class = "throttled" if error.status is not None else "not_sent"
    cap = limits.max_throttled_in_a_row()
    in_a_row = throttled_in_a_row(op) if error.status is not None else 0
    until = wait_until(op, error, actor)
    if in_a_row >= cap:
        # Waiting is the destination's to decide, but not for ever: a person looks (the
        # integration stays throttled until the time it named, for every other operation).
        fail_operation(
            op,
            enquiry,
            actor,
            "throttled_too_often",
            f"{op.integration or 'the destination'} answered {error.status} (wait) {in_a_row} "
            f"times in a row; last: {error.message[:200]}",
        )
        save_changed(op)
        return "failed (throttled too often)"
    if op.integration is not None and error.status is None:
        # No status: our own limit gave no turn in time; the destination said nothing.
        local = timezone.localtime(until)
        label = f"waiting for its turn at the {op.integration} until {local:%H:%M:%S}"
    elif op.integration is not None:
        label = limits.throttle_label(op.integration, until)
    else:
        label = f"throttled until {timezone.localtime(until):%H:%M:%S}"
    op.next_attempt_at = until
    op.defer(
        actor=actor,
        reason=f"{label}; not a failure, sent again then (retry budget untouched)",
        evidence={
            "status": error.status,
            "retry_after_seconds": error.retry_after,
            "throttled_until": until.isoformat(),
        },
    )
    save_changed(op)
    enqueue(op, EXECUTE, at=until)
    return "throttled"
