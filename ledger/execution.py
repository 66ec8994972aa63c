"""The engine: execute an approved operation, reconcile an unknown one.

Executing, in order (DESIGN.md, "The operation ledger"):

1. claim: lock the enquiry, then the operation row with SKIP LOCKED; only an `approved`,
   unheld, due operation is claimable. Record the attempt, move to `submitted`, take a lease,
   and COMMIT. A second worker holding the same task finds nothing to claim and returns.
2. call the destination with the stable reference and the idempotency key, holding no lock.
3. record the outcome and COMMIT: lock again, check the lease is still ours, apply the table:

   success   -> confirmed, external ID saved
   transient -> approved again with next_attempt_at (backoff) while the budget lasts; failed
   throttled -> (a 429, or a 503 with Retry-After) approved again after the destination's
                time, its integration throttled until then; the retry budget is not spent
   uncertain -> unknown, the enquiry submission_unknown; look up at once, and believe "not
                found" only after the settle delay
   invalid   -> failed, not retried; the message kept for a person
   auth      -> failed, not retried; the integration's owner recorded

Reconciling is a read, so it asks first and commits once: look the record up holding no lock,
then lock, record the lookup's attempt and act on what was found, unless the operation moved
on since it was read (then the attempt says `superseded` and nothing else changes).

Locks are always taken enquiry first, then operation, so the engine, the sweeper and intake's
revision edits never wait on each other in a circle.
"""

from __future__ import annotations

import functools
import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from intake.models import Enquiry
from ledger import effects, failpoints, journal, limits
from ledger.connectors.base import CallResult, ConnectorError, ErrorKind, LookupResult
from ledger.kinds import connector_for
from ledger.models import Attempt, Op, Operation, payload_hash
from ledger.policies import policy_for, retry_budget
from ledger.queueing import EXECUTE, RECONCILE, enqueue
from ledger.worker import worker_actor, worker_name

logger = logging.getLogger("ledger.execution")

BODY_LIMIT = 2000
LEASE_GRACE_SECONDS = 5
SECOND_LOOK_MIN_SECONDS = 1.0


def lease_seconds() -> float:
    # No call can outlive the cluster's timeout: the guard kills the worker first.
    return float(settings.Q_CLUSTER.get("timeout") or 60) + LEASE_GRACE_SECONDS


# The enquiry that owns an operation, locked, then the operation, locked, and (where asked) its
# integration, read unlocked: one written-out statement, one round trip. The enquiry's lock is
# taken inside the materialised WITH, the operation's by the outer FOR UPDATE OF op, which only
# sees a joined row once the enquiry is locked: the order is enquiry, then operation, as
# everywhere else. The operation's conditions are rechecked on its newest version once it is
# locked (READ COMMITTED), so a row that changed meanwhile is passed over, as before.
# Compiling the equivalent querysets (a Subquery; select_for_update with select_related), and
# then RawQuerySet's column mapping, were the largest items in a worker's CPU profile
# (docs/benchmarks.md), hence the statement and the plain row reader below.
_LOCK_SQL = (
    "WITH enquiry AS MATERIALIZED (SELECT * FROM intake_enquiry WHERE id = "
    "(SELECT enquiry_id FROM ledger_operation WHERE id = %s) FOR UPDATE) "
    "SELECT {columns} FROM enquiry JOIN ledger_operation op ON op.enquiry_id = enquiry.id{join} "
    "WHERE op.id = %s{conditions} FOR UPDATE OF op{skip}"
)
_INTEGRATION_JOIN = (
    " LEFT JOIN ledger_integration integration ON integration.id = op.integration_id"
)


class _RowReader:
    """Model instances from a row of plain columns, as the ORM makes them (converters, from_db)."""

    def __init__(self, model, alias):
        self.model = model
        self.fields = model._meta.concrete_fields
        self.names = [f.attname for f in self.fields]
        self.columns = ", ".join(
            f"{alias}.{connection.ops.quote_name(f.column)}" for f in self.fields
        )
        self.converters = [
            (i, f.get_db_converters(connection))
            for i, f in enumerate(self.fields)
            if f.get_db_converters(connection)
        ]

    def read(self, row, start):
        values = list(row[start : start + len(self.fields)])
        for i, converters in self.converters:
            for convert in converters:
                values[i] = convert(values[i], self.fields[i], connection)
        return self.model.from_db(connection.alias, self.names, values)


def _conditions(filters) -> str:
    """``AND op.<column> = %s`` for each of the caller's column = value conditions."""
    return "".join(f" AND op.{Operation._meta.get_field(name).column} = %s" for name in filters)


def _read_integration(op, integrations, row, start):
    op.integration = integrations.read(row, start) if op.integration_id is not None else None


@functools.cache
def _readers():
    from ledger.models import Integration

    return (
        _RowReader(Enquiry, "enquiry"),
        _RowReader(Operation, "op"),
        _RowReader(Integration, "integration"),
    )


def lock_operation(op_id, *, skip_locked=False, with_integration=False, **filters):
    """Lock the enquiry, then the operation (the one lock order everywhere): (enquiry, op).

    ``filters``: column = value conditions the operation must meet (``state=``, ``held=``);
    with ``skip_locked`` an operation another transaction holds is passed over. (None, None)
    when no operation meets them. ``with_integration``: the operation's integration is read in
    the same statement (unlocked); otherwise it is read when first used.
    """
    pk = Operation._meta.pk.to_python(op_id)  # a malformed ID fails as the ORM's would
    enquiries, operations, integrations = _readers()
    columns = [enquiries.columns, operations.columns]
    if with_integration:
        columns.append(integrations.columns)
    sql = _LOCK_SQL.format(
        columns=", ".join(columns),
        join=_INTEGRATION_JOIN if with_integration else "",
        conditions=_conditions(filters),
        skip=" SKIP LOCKED" if skip_locked else "",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [pk, pk, *filters.values()])
        row = cursor.fetchone()
    if row is None:
        return None, None
    enquiry = enquiries.read(row, 0)
    op = operations.read(row, len(enquiries.fields))
    op.enquiry = enquiry
    if with_integration:
        _read_integration(op, integrations, row, len(enquiries.fields) + len(operations.fields))
    return enquiry, op


_READ_SQL = "SELECT {columns} FROM ledger_operation op{join} WHERE op.id = %s{conditions}"


def read_operation(op_id, **filters):
    """The operation and its integration, unlocked, in one statement (None when ``filters``,
    column = value conditions, do not hold): what a lookup needs before it asks anyone."""
    pk = Operation._meta.pk.to_python(op_id)
    _, operations, integrations = _readers()
    sql = _READ_SQL.format(
        columns=f"{operations.columns}, {integrations.columns}",
        join=_INTEGRATION_JOIN,
        conditions=_conditions(filters),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [pk, *filters.values()])
        row = cursor.fetchone()
    if row is None:
        return None
    op = operations.read(row, 0)
    _read_integration(op, integrations, row, len(operations.fields))
    return op


def _clear_lease(op):
    op.lease_owner = ""
    op.lease_expires_at = None


def _finish_attempt(attempt, *, outcome, status=None, body="", error=None):
    """Write the attempt's ending: only these fields, so nothing else in the row is touched."""
    fields = {
        "ended_at": timezone.now(),
        "outcome": outcome,
        "response_status": status,
        "response_body": (body or "")[:BODY_LIMIT],
    }
    if error is not None:
        fields["error_class"] = error.kind.value
        fields["error_message"] = error.message[:2000]
    for name, value in fields.items():
        setattr(attempt, name, value)
    if attempt._state.adding:
        attempt.save()  # a lookup's attempt, recorded whole with what was found
        return
    Attempt.objects.filter(pk=attempt.pk).update(**fields)


# --- execute ------------------------------------------------------------------------------------


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
    connector = connector_for(op)
    try:
        with limits.using(scope):
            result = connector.call(op)
    except ConnectorError as exc:
        return record_failure(op.pk, attempt, exc, actor=actor)
    except Exception as exc:  # a bug, not a destination answer: we cannot say it was not sent
        logger.exception("connector crashed on %s", op.pk)
        error = ConnectorError(ErrorKind.UNCERTAIN, f"connector error: {exc!r}")
        return record_failure(op.pk, attempt, error, actor=actor)
    failpoints.hit("after_call_succeeded")
    return record_success(op.pk, attempt, result, actor=actor)


def claim(op_id):
    """(operation, attempt, shortcut) committed as `submitted`, or None when not claimable.
    An operation whose integration's turn is not near (ledger.limits.admission) is put back
    on the queue for its turn, unchanged."""
    now = timezone.now()
    actor = worker_actor()
    with transaction.atomic(), journal.deferred():
        enquiry, op = lock_operation(
            op_id, skip_locked=True, with_integration=True, state=Op.APPROVED, held=False
        )
        if op is None:
            return None
        if op.next_attempt_at and op.next_attempt_at > now:
            return None  # a delayed task (or the sweeper) brings it back when due
        integration = op.integration
        if integration is not None and integration.paused:
            hold(op, actor=actor, reason=f"{integration} is paused")
            return None
        if op.action == "crm.create_enquiry" and enquiry.approved_revision != op.revision:
            op.cancel(
                actor=actor,
                reason=f"the approval of revision {op.revision} no longer stands",
                evidence={"approved_revision": enquiry.approved_revision},
            )
            op.save()
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
            attempt.save()
            op.attempt_count = number
            op.last_attempted_at = now
            _fail(op, enquiry, actor, "payload_mismatch", attempt.error_message, owner=True)
            op.save()
            return None
        if limits.applies(integration, now):
            later = limits.admission(integration, now=now)
            if later is not None:
                come_back(op, EXECUTE, later.at)
                return None
        attempt.save()
        op.attempt_count = number
        op.last_attempted_at = now
        op.budget_used += 1
        op.lease_owner = worker_name()
        op.lease_expires_at = now + timedelta(seconds=lease_seconds())
        op.next_attempt_at = None
        op.submit(actor=actor, reason=f"attempt {number}", evidence={"attempt": number})
        op.save()
        if op.action == "crm.create_enquiry" and enquiry.state == "approved":
            enquiry.submit(
                actor=actor,
                reason=f"sending revision {op.revision} to the CRM",
                evidence={"operation": str(op.pk), "attempt": number},
            )
            enquiry.save()
    shortcut = effects.already_done(op)
    return op, attempt, shortcut


def come_back(op, func, at):
    """Not this operation's turn at its integration: queued again for ``at``. Nothing else
    changes (no attempt, no transition, no retry budget), so it is not journalled."""
    op.next_attempt_at = at
    op.save(update_fields=["next_attempt_at", "updated_at"])
    enqueue(op, func, at=at)


def hold(op, *, actor, reason):
    op.held = True
    op.save(update_fields=["held", "updated_at"])
    journal.record(op, "ledger.operation.held", actor=actor, reason=reason)


def record_success(op_id, attempt, result: CallResult, *, actor, outcome="success") -> str:
    """``attempt``: the Attempt this worker recorded at its claim."""
    with transaction.atomic(), journal.deferred():
        enquiry, op = lock_operation(op_id)
        _finish_attempt(attempt, outcome=outcome, status=result.status, body=result.body)
        if op.state not in (Op.SUBMITTED, Op.UNKNOWN):
            journal.record(
                op,
                "ledger.operation.late_outcome",
                actor=actor,
                reason=f"attempt {attempt.number} succeeded after the operation became {op.state}",
                evidence={"external_id": result.external_id},
            )
            return "late success"
        _confirm(op, enquiry, result, actor, f"attempt {attempt.number}: {outcome}")
        return "confirmed"


def _confirm(op, enquiry, result: CallResult, actor, reason):
    op.external_id = result.external_id or op.external_id
    op.result = {**op.result, **result.result}
    op.last_error_class = ""
    op.last_error_message = ""
    op.last_error_status = None
    op.next_attempt_at = None
    _clear_lease(op)
    op.confirm(
        actor=actor,
        reason=reason,
        evidence={"external_id": op.external_id, "status": result.status},
    )
    op.save()
    effects.on_success(op, result, enquiry=enquiry, actor=actor)


def record_failure(op_id, attempt, error: ConnectorError, *, actor) -> str:
    """``attempt``: the Attempt this worker recorded at its claim."""
    with transaction.atomic(), journal.deferred():
        enquiry, op = lock_operation(op_id)
        throttled = error.retry_after is not None and error.kind is ErrorKind.TRANSIENT
        _finish_attempt(
            attempt,
            outcome=("throttled" if error.status else "not_sent")
            if throttled
            else error.kind.value,
            status=error.status,
            body=error.body,
            error=error,
        )
        if op.state != Op.SUBMITTED or op.lease_owner != worker_name():
            journal.record(
                op,
                "ledger.operation.late_outcome",
                actor=actor,
                reason=f"attempt {attempt.number} ended {error.kind.value} after the operation "
                f"became {op.state}",
                evidence={"error": error.message[:500]},
            )
            return "late failure"
        op.last_error_class = error.kind.value
        op.last_error_message = error.message[:2000]
        op.last_error_status = error.status
        _clear_lease(op)
        kind = error.kind
        if throttled:
            return _throttled(op, error, actor)
        if kind is ErrorKind.TRANSIENT:
            budget, backoff = retry_budget(op)
            if op.budget_used < budget:
                delay = backoff * (2 ** (op.budget_used - 1))
                op.next_attempt_at = timezone.now() + timedelta(seconds=delay)
                op.defer(
                    actor=actor,
                    reason=f"not sent ({error.message[:200]}); retry {op.budget_used + 1} of "
                    f"{budget} in {delay:g}s",
                    evidence={"error_class": "transient", "delay_seconds": delay},
                )
                op.save()
                enqueue(op, EXECUTE, at=op.next_attempt_at)
                return "retry scheduled"
            _fail(op, enquiry, actor, "retry_budget_exhausted", error.message, owner=True)
            op.save()
            return "failed (budget)"
        if kind is ErrorKind.UNCERTAIN and error.attention:
            # The destination answered, but in a way no look-up can settle: a person.
            op.result = {**op.result, **error.evidence}
            _clear_lease(op)
            op.mark_unknown(actor=actor, reason=error.message[:1000], evidence=dict(error.evidence))
            _needs_person(op, actor, error.attention, error.message[:1000])
            effects.on_unknown(op, enquiry=enquiry, actor=actor, reason=error.message[:500])
            return "unknown (a person must look)"
        if kind is ErrorKind.UNCERTAIN:
            to_unknown(op, enquiry, actor, f"no answer: {error.message[:300]}")
            return "unknown"
        if kind is ErrorKind.AUTH:
            attention = "access_denied" if op.action == "documents.extract" else "auth"
            _fail(op, enquiry, actor, attention, error.message, owner=True)
            op.save()
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
        _fail(op, enquiry, actor, "invalid", error.message, owner=False)
        op.save()
        return "failed (invalid)"


def _throttled(op, error: ConnectorError, actor) -> str:
    """The destination asked us to wait: not a failure. Its integration is throttled until
    then (no worker sends to it before), and this operation comes back then, the call it just
    made not counted against its retry budget. With no status, nothing was sent: our own limit
    gave the request no turn in time (ledger.limits.before_request); it simply comes back."""
    op.budget_used = max(op.budget_used - 1, 0)
    op.last_error_class = "throttled" if error.status is not None else "not_sent"
    until = _wait_until(op, error, actor)
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
    op.save()
    enqueue(op, EXECUTE, at=until)
    return "throttled"


def _wait_until(op, error: ConnectorError, actor):
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


def _fail(op, enquiry, actor, attention, message, *, owner):
    op.attention = attention
    if owner and op.integration is not None and op.integration.owner_id:
        op.owner_id = op.integration.owner_id
    op.next_attempt_at = None
    _clear_lease(op)
    op.fail(
        actor=actor,
        reason=f"{attention}: {message}"[:1000],
        evidence={"attention": attention, "owner_id": op.owner_id},
    )
    op.save()
    effects.on_failed(op, enquiry=enquiry, actor=actor, attention=attention, message=message)


def to_unknown(op, enquiry, actor, reason, evidence=None):
    """`unknown`, then reconcile: after the settle delay, or a person when lookup is off."""
    _clear_lease(op)
    op.mark_unknown(actor=actor, reason=reason, evidence=evidence or {})
    schedule_reconcile(op, actor=actor)
    op.save()
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
        _needs_person(op, actor, "lookup_unavailable", f"{integration} cannot be looked up")
        return
    op.next_attempt_at = at
    op.save()
    enqueue(op, RECONCILE, at=at)


def _needs_person(op, actor, attention, reason):
    op.attention = attention
    op.next_attempt_at = None
    if op.integration is not None and op.integration.owner_id:
        op.owner_id = op.integration.owner_id
    op.save()
    journal.record(
        op,
        "ledger.operation.needs_person",
        actor=actor,
        reason=reason,
        evidence={"attention": attention},
        from_state=op.state,
        to_state=op.state,
    )


def settled_at(op):
    """When a lookup's "not found" can be believed: the settle delay after the last call."""
    last_call = op.attempts.filter(kind="call").order_by("-number").first()
    reference = op.state_changed_at
    if last_call is not None:
        reference = last_call.ended_at or max(last_call.started_at, op.state_changed_at)
    delay = op.integration.capabilities.settle_delay_seconds if op.integration else 0.0
    return reference + timedelta(seconds=delay)


# --- reconcile ----------------------------------------------------------------------------------


def reconcile(op_id) -> str:
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
    op = read_operation(op_id, state=Op.UNKNOWN)
    if op is None:
        return "nothing to claim"
    if limits.applies(op.integration, started):
        later = limits.admission(op.integration, now=started)
        if later is not None:
            with transaction.atomic():
                _, locked = lock_operation(op.pk, skip_locked=True, state=Op.UNKNOWN)
                if locked is not None and locked.attempt_count == op.attempt_count:
                    come_back(locked, RECONCILE, later.at)
            return "not its turn"
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
            logger.exception("lookup crashed on %s", op.pk)
            found, error = None, ConnectorError(ErrorKind.UNCERTAIN, f"lookup error: {exc!r}")
        return record_lookup(
            op.pk, found, error, actor=actor, started=started, seen_attempts=op.attempt_count
        )
    finally:
        scope.release()


def _ref(op):
    return op.payload.get("reference") or op.payload.get("external_id") or op.idempotency_key


def record_lookup(
    op_id, found: LookupResult | None, error, *, actor, started, seen_attempts
) -> str:
    """Record a lookup made at ``started`` of the operation as read with ``seen_attempts``
    attempts, and act on what it found (the table in DESIGN.md, "Reconcile")."""
    with transaction.atomic(), journal.deferred():
        enquiry, op = lock_operation(op_id)
        if op is None:
            return "nothing to claim"
        attempt = Attempt(
            operation=op,
            number=op.attempt_count + 1,
            kind="lookup",
            worker=actor,
            started_at=started,
            request_summary={"lookup": policy_for(op).check_first, "reference": _ref(op)},
        )
        moved_on = op.state != Op.UNKNOWN or op.attempt_count != seen_attempts
        op.attempt_count = attempt.number
        op.last_attempted_at = started
        if moved_on:
            _finish_attempt(attempt, outcome="superseded", error=error)
            op.save(update_fields=["attempt_count", "last_attempted_at", "updated_at"])
            return "superseded"
        _clear_lease(op)
        policy = policy_for(op)
        if error is not None and error.retry_after is not None:
            # Asked to wait: look again after the destination's time; no person needed.
            _finish_attempt(
                attempt, outcome="throttled", status=error.status, body=error.body, error=error
            )
            op.last_error_class = "throttled"
            op.last_error_message = f"lookup: {error.message}"[:2000]
            schedule_reconcile(op, actor=actor, at=_wait_until(op, error, actor))
            return "throttled"
        if error is not None:
            _finish_attempt(
                attempt, outcome="lookup_failed", status=error.status, body=error.body, error=error
            )
            op.last_error_class = error.kind.value
            op.last_error_message = f"lookup: {error.message}"[:2000]
            op.last_error_status = error.status
            _needs_person(op, actor, "lookup_failed", f"lookup failed: {error.message[:300]}")
            return "lookup failed"
        if not found.supported:
            _finish_attempt(attempt, outcome="lookup_unavailable", status=found.status)
            _needs_person(op, actor, "lookup_unavailable", "the destination cannot be looked up")
            return "lookup unavailable"
        ids = found.external_ids
        evidence = {"found": ids, "attempt": attempt.number}
        if found.failed:
            _finish_attempt(attempt, outcome="found_failed", status=found.status, body=found.body)
            _fail(op, enquiry, actor, "delivery_failed", found.failed, owner=True)
            return "failed (delivery)"
        if len(ids) == 1:
            _finish_attempt(attempt, outcome="found", status=found.status, body=found.body)
            result = CallResult(found.status, ids[0], found.body, {"reconciled": True})
            _confirm(op, enquiry, result, actor, f"found at the destination: {ids[0]}")
            return "confirmed"
        if len(ids) > 1:
            _finish_attempt(attempt, outcome="duplicates", status=found.status, body=found.body)
            op.result = {**op.result, "duplicates": ids}
            _needs_person(
                op, actor, "duplicate_records", f"{len(ids)} records carry this reference"
            )
            journal.record(
                op,
                "ledger.operation.duplicate_detected",
                actor=actor,
                reason=f"{len(ids)} records for {_ref(op)}",
                evidence=evidence,
            )
            return "duplicates"
        # Not found.
        if found.repeatable or not policy.is_write:
            _finish_attempt(attempt, outcome="repeatable", status=found.status)
            return _retry_after_lookup(op, enquiry, actor, "a read: safe to do again")
        settle = settled_at(op)
        if attempt.started_at < settle:
            _finish_attempt(attempt, outcome="not_found_unsettled", status=found.status)
            schedule_reconcile(op, actor=actor, at=settle)
            return "not found yet (settling)"
        if op.integration is not None and not op.integration.capabilities.idempotency_key:
            last_call = op.attempts.filter(kind="call").order_by("-number").first()
            earlier = op.attempts.filter(
                kind="lookup",
                outcome="not_found_first_look",
                number__gt=last_call.number if last_call else 0,
            )
            if not earlier.exists():
                _finish_attempt(attempt, outcome="not_found_first_look", status=found.status)
                gap = max(op.integration.capabilities.settle_delay_seconds, SECOND_LOOK_MIN_SECONDS)
                schedule_reconcile(op, actor=actor, at=timezone.now() + timedelta(seconds=gap))
                return "not found (first look)"
        _finish_attempt(attempt, outcome="not_found", status=found.status)
        return _retry_after_lookup(op, enquiry, actor, "not found at the destination")


def _retry_after_lookup(op, enquiry, actor, why):
    budget, _backoff = retry_budget(op)
    if op.budget_used >= budget:
        _fail(op, enquiry, actor, "retry_budget_exhausted", why, owner=True)
        return "failed (budget)"
    op.next_attempt_at = None
    op.retry(
        actor=actor,
        reason=f"{why}; retrying with the same key",
        evidence={"idempotency_key": op.idempotency_key},
    )
    op.save()
    enqueue(op, EXECUTE)
    return "retrying"
