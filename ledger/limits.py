"""Per-integration limits: a request rate, calls in flight, and the destination's own "wait".

Everything lives in PostgreSQL, so a limit holds across every worker of every cluster on every
machine (docs/integrations.md, "Limits"):

- the pace: ``ledger_limiterstate``, one row per integration, locked for the few statements
  of acquire(). ``next_slot_at`` is the earliest start of the next call; each call takes the
  next slot, one interval (1 / rate, widened by LIMITS_RATE_MARGIN) after the last, and no
  credit builds up while the destination is idle, so no burst ever exceeds the rate.
- calls in flight: ``ledger_inflightslot``, a lease row per call, deleted when the call ends
  and ignored once it expires (the engine's lease: the cluster's timeout and a grace), so a
  killed worker's slot comes back and the limit is never lowered for good.
- the destination's "wait": a 429 (or a 503 with ``Retry-After``) sets the integration's
  ``throttled_until``; nothing is sent to it before then, by any worker (throttle()).

Two steps. When the engine claims an operation (or before a look-up) it asks admission():
is the turn near? If not, the operation goes back on the queue for later, without an attempt
and without touching its retry budget; those come back one interval apart, in the order they
were turned away (``queue_until``), so a backlog drains at the rate, oldest first. Then every
request takes its own turn at the last moment (before_request, from Connector.request): a
short transaction that reads the clock once the limiter's row is locked, so the turns are the
send times; a slot within LIMITS_WAIT_SECONDS is waited for outside every transaction.
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from config import roundtrip
from ledger import journal
from ledger.models import Integration, Operation, OperationState
from ledger.rates import RATE_MAX, RATE_MIN
from ledger.worker import process_is_gone, worker_name

# --- Retry-After --------------------------------------------------------------------------------

DEFAULT_RETRY_AFTER_SECONDS = 5.0
MAX_RETRY_AFTER_SECONDS = 3600.0
# "Retry-After: 0" (or a date already past) read as no wait, with a 429 spending no budget,
# sent 57 POSTs in 12 s for one operation: every wait is at least this long.
MIN_RETRY_AFTER_SECONDS = 1.0
# Consecutive throttled answers to one operation before it goes to a person.
MAX_THROTTLED_IN_A_ROW = 10
_DELAY_SECONDS = re.compile(r"[0-9]{1,9}")  # ASCII only: "²" and "٣" are digits to isdigit()


def parse_retry_after(value, *, now: datetime | None = None) -> float:
    """Seconds to wait from a ``Retry-After`` value: delay-seconds or an HTTP date (RFC 9110).

    Anything else (empty, negative, fractional, a digit that is not ASCII, a date that cannot
    be read) gives the default; nothing waits less than LIMITS_MIN_RETRY_AFTER (0, or a date
    in the past, would mean asking again at once, for ever) or longer than
    LIMITS_MAX_RETRY_AFTER (a destination's mistake must not stop delivery for days).
    """
    default = float(getattr(settings, "LIMITS_DEFAULT_RETRY_AFTER", DEFAULT_RETRY_AFTER_SECONDS))
    floor = float(getattr(settings, "LIMITS_MIN_RETRY_AFTER", MIN_RETRY_AFTER_SECONDS))
    ceiling = float(getattr(settings, "LIMITS_MAX_RETRY_AFTER", MAX_RETRY_AFTER_SECONDS))
    return min(max(_retry_after_seconds(value, default, now), floor), max(ceiling, floor))


def max_throttled_in_a_row() -> int:
    return int(getattr(settings, "LIMITS_MAX_THROTTLED_IN_A_ROW", MAX_THROTTLED_IN_A_ROW))


def _retry_after_seconds(value, default: float, now) -> float:
    if not isinstance(value, str):
        return default
    text = value.strip()
    if not text:
        return default
    if _DELAY_SECONDS.fullmatch(text):
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return default
    if when is None:
        return default
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # "-0000": UTC, with no claim about the local zone
    now = now or timezone.now()
    return (when - now).total_seconds()


# --- the pace -----------------------------------------------------------------------------------


def wait_seconds() -> float:
    return float(getattr(settings, "LIMITS_WAIT_SECONDS", 0.5))


def _margin() -> float:
    return float(getattr(settings, "LIMITS_RATE_MARGIN", 0.05))


def interval_for(rate) -> float:
    """Seconds between two calls' starts: a little over 1 / rate, so that the jitter between
    our clock and the destination's arrival never puts rate + 1 calls in one of its seconds.
    A row saved before the rule (parse_rate) is read within it: never an overflow."""
    rate = min(max(float(rate), RATE_MIN), RATE_MAX)
    return (1.0 + _margin()) / rate


def in_flight_seconds() -> float:
    # As the engine's lease: no call outlives the cluster's timeout (the guard kills it first).
    return float(settings.Q_CLUSTER.get("timeout") or 60) + 5


# Turned away for a full in-flight limit (no rate to space by): come back this far apart.
IN_FLIGHT_SPACING_SECONDS = 0.02


def applies(integration, now=None) -> bool:
    """Whether a call to ``integration`` must ask the limiter first (cheap: the row as read)."""
    if integration is None:
        return False
    if integration.max_requests_per_second or integration.max_in_flight:
        return True
    until = integration.throttled_until
    return until is not None and until > (now or timezone.now())


@dataclass
class NotYet:
    """No turn now: come back at ``at``. ``throttled``: the destination asked us to wait."""

    at: datetime
    why: str
    throttled: bool = False


@dataclass
class Permit:
    """A turn: start the request at ``slot_at``; ``lease_id``: its in-flight slot, if any."""

    integration_id: int
    slot_at: datetime
    lease_id: int | None = None

    def wait(self) -> None:
        """Sleep until the slot, outside every transaction (never long: acquire() says
        NotYet for a slot further away than the caller's wait)."""
        delay = (self.slot_at - timezone.now()).total_seconds()
        if delay > 0:
            time.sleep(delay)

    def release(self) -> None:
        """Give the in-flight slot back (idempotent)."""
        if self.lease_id is None:
            return
        lease, self.lease_id = self.lease_id, None
        with roundtrip.prepared_cursor() as cursor:
            cursor.execute("DELETE FROM ledger_inflightslot WHERE id = %s", [lease])


_STATE_SQL = (
    "SELECT s.next_slot_at, s.queue_until, i.max_requests_per_second, i.max_in_flight, "
    "i.throttled_until, i.throttle_reason FROM ledger_limiterstate s "
    "JOIN ledger_integration i ON i.id = s.integration_id "
    "WHERE s.integration_id = %s FOR UPDATE OF s"
)


def _ensure_state(cursor, integration_id):
    cursor.execute(
        "INSERT INTO ledger_limiterstate (integration_id) VALUES (%s) ON CONFLICT DO NOTHING",
        [integration_id],
    )


def _locked_state(cursor, integration_id):
    cursor.execute(_STATE_SQL, [integration_id])
    row = cursor.fetchone()
    if row is None:
        _ensure_state(cursor, integration_id)
        cursor.execute(_STATE_SQL, [integration_id])
        row = cursor.fetchone()
    return row


def _live_leases(cursor, integration_id, now) -> int:

    cursor.execute(
        "DELETE FROM ledger_inflightslot WHERE integration_id = %s AND expires_at <= %s",
        [integration_id, now],
    )
    cursor.execute(
        "SELECT id, holder FROM ledger_inflightslot WHERE integration_id = %s",
        [integration_id],
    )
    rows = cursor.fetchall()
    # A holder that died on this host gives its slot back now, not when the lease runs out.
    gone = [pk for pk, holder in rows if process_is_gone(holder)]
    if gone:
        cursor.execute("DELETE FROM ledger_inflightslot WHERE id = ANY(%s)", [gone])
    return len(rows) - len(gone)


def acquire(integration, *, holder="", operation_id=None, wait=None, now=None):
    """Take a turn for one request to ``integration`` now: a Permit (its slot at most ``wait``
    seconds away, default LIMITS_WAIT_SECONDS; its in-flight lease taken), or NotYet.

    Its own short transaction: the limiter's row is locked, the clock read after the lock is
    granted (a turn is never computed from a time another worker's turn has overtaken), the
    turn written, and the lock let go at once, so the request starts right after."""
    wait = wait_seconds() if wait is None else wait
    with transaction.atomic(), roundtrip.prepared_cursor() as cursor:
        next_slot, _queue, rate, max_in_flight, *_ = _locked_state(cursor, integration.pk)
        now = now or timezone.now()
        if max_in_flight and _live_leases(cursor, integration.pk, now) >= max_in_flight:
            spacing = interval_for(rate) if rate else IN_FLIGHT_SPACING_SECONDS
            return NotYet(now + timedelta(seconds=spacing), f"{max_in_flight} call(s) in flight")
        # Read after the leases, in a statement of its own: the engine records a 429's throttle
        # before it gives the call's slot back, so whoever sees the slot free sees the throttle.
        cursor.execute(
            "SELECT throttled_until, throttle_reason FROM ledger_integration WHERE id = %s",
            [integration.pk],
        )
        throttled_until, why = cursor.fetchone()
        if throttled_until is not None and throttled_until > now:
            return NotYet(throttled_until, why or "throttled by the destination", throttled=True)
        slot = now
        if rate:
            slot = max(next_slot or now, now)
            if (slot - now).total_seconds() > wait:
                return NotYet(slot, f"at most {rate:g} call(s) per second")
            _set(cursor, integration.pk, next_slot_at=slot + timedelta(seconds=interval_for(rate)))
        lease_id = None
        if max_in_flight:
            cursor.execute(
                "INSERT INTO ledger_inflightslot "
                "(integration_id, holder, operation_id, acquired_at, expires_at) "
                "VALUES (%s, %s, %s, %s, %s) RETURNING id",
                [
                    integration.pk,
                    holder[:120],
                    operation_id,
                    now,
                    now + timedelta(seconds=in_flight_seconds()),
                ],
            )
            lease_id = cursor.fetchone()[0]
    return Permit(integration.pk, slot, lease_id)


_ADMISSION_SQL = (
    "SELECT s.next_slot_at, i.max_requests_per_second, i.max_in_flight, i.throttled_until, "
    "i.throttle_reason, (SELECT COUNT(*) FROM ledger_inflightslot f "
    "WHERE f.integration_id = i.id AND f.expires_at > %s) "
    "FROM ledger_integration i LEFT JOIN ledger_limiterstate s ON s.integration_id = i.id "
    "WHERE i.id = %s"
)


def admission(integration, *, now=None) -> NotYet | None:
    """Whether an operation may be claimed for a call or a look-up now: None when its turn is
    near (the request takes the turn itself, ledger.connectors.base), else NotYet with a time
    to come back: after every operation already told to come back, one interval apart, so
    that those return in order and at the rate instead of all at once.

    Reads without a lock; writes (one statement) only when it says NotYet."""
    now = now or timezone.now()
    with roundtrip.prepared_cursor() as cursor:
        cursor.execute(_ADMISSION_SQL, [now, integration.pk])
        next_slot, rate, max_in_flight, throttled_until, why, in_flight = cursor.fetchone()
        spacing = interval_for(rate) if rate else IN_FLIGHT_SPACING_SECONDS
        if throttled_until is not None and throttled_until > now:
            base, why, throttled = throttled_until, why or "throttled by the destination", True
        elif max_in_flight and in_flight >= max_in_flight:
            base, why, throttled = now, f"{max_in_flight} call(s) in flight", False
        elif rate and next_slot is not None and (next_slot - now).total_seconds() > wait_seconds():
            base, why, throttled = next_slot, f"at most {rate:g} call(s) per second", False
        else:
            return None
        _ensure_state(cursor, integration.pk)
        cursor.execute(
            "UPDATE ledger_limiterstate SET queue_until = GREATEST(COALESCE(queue_until, %s), %s)"
            " + %s WHERE integration_id = %s RETURNING queue_until",
            [base, base, timedelta(seconds=spacing), integration.pk],
        )
        at = cursor.fetchone()[0] - timedelta(seconds=spacing)
    return NotYet(at, why, throttled=throttled)


def _set(cursor, integration_id, **values):
    columns = ", ".join(f"{name} = %s" for name in values)
    cursor.execute(
        f"UPDATE ledger_limiterstate SET {columns} WHERE integration_id = %s",
        [*values.values(), integration_id],
    )


def turns(integration, count: int, *, now=None) -> list[datetime]:
    """``count`` start times one interval apart, after every turn already handed out: when
    each operation of a released backlog is queued for, so that they arrive at the rate, in
    the order given, instead of all at once. Empty when the integration has no rate."""
    rate = integration.max_requests_per_second
    if not rate or count <= 0:
        return []
    now = now or timezone.now()
    spacing = timedelta(seconds=interval_for(rate))
    with transaction.atomic(), roundtrip.prepared_cursor() as cursor:
        next_slot, queue_until, *_ = _locked_state(cursor, integration.pk)
        first = max(now, next_slot or now, queue_until or now)
        times = [first + spacing * i for i in range(count)]
        _set(cursor, integration.pk, queue_until=first + spacing * count)
    return times


def throttle(integration, *, seconds: float, reason: str, actor, evidence=None) -> datetime:
    """The destination asked us to wait ``seconds``: nobody sends to it before then. Journalled
    on the integration when it moves the time on (many workers may hear the same 429)."""

    until = timezone.now() + timedelta(seconds=seconds)
    reason = reason[:300]
    later = Q(throttled_until__isnull=True) | Q(throttled_until__lt=until)
    updated = (
        type(integration)
        .objects.filter(later, pk=integration.pk)
        .update(throttled_until=until, throttle_reason=reason)
    )
    if updated:
        integration.throttled_until = until
        integration.throttle_reason = reason
        journal.record(
            integration,
            "ledger.integration.throttled",
            actor=actor,
            reason=reason,
            evidence={"until": until.isoformat(), "seconds": seconds, **(evidence or {})},
        )
    return until


def throttle_label(integration, until: datetime) -> str:
    """ "throttled by the CRM until 14:05:30": what a person reads (local time of the site)."""
    local = timezone.localtime(until)
    return f"throttled by the {integration} until {local:%H:%M:%S}"


# --- the choke point every request passes (ledger.connectors.base.Connector.request) -----------


class Scope:
    """The in-flight slots a call or a look-up took, given back by the engine once it has
    recorded the outcome (so a throttle a 429 sets is in place before anyone else sends)."""

    def __init__(self, operation=None):
        self.operation = operation
        self.permits: list[Permit] = []

    def release(self) -> None:
        for permit in self.permits:
            permit.release()
        self.permits.clear()


_current: ContextVar[Scope | None] = ContextVar("limits_scope", default=None)


@contextlib.contextmanager
def using(scope: Scope):
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


class Throttled(Exception):
    """No turn for a request (ledger.connectors.base turns it into a transient, never-sent
    ConnectorError that carries ``retry_after`` and no status)."""

    def __init__(self, not_yet: NotYet):
        super().__init__(not_yet.why)
        self.not_yet = not_yet


def before_request(integration) -> Permit | None:
    """Called before every HTTP request to ``integration``: waits for its turn (at most
    LIMITS_WAIT_SECONDS, plus a few short polls while the in-flight slots are full), or raises
    Throttled. Returns the Permit to hand to after_request() (None: no limits)."""
    if not applies(integration):
        return None

    scope = _current.get()
    operation = scope.operation if scope is not None else None
    deadline = time.monotonic() + wait_seconds()
    while True:
        got = acquire(
            integration,
            holder=worker_name(),
            operation_id=getattr(operation, "pk", None),
            wait=max(deadline - time.monotonic(), 0.0),
        )
        if isinstance(got, Permit):
            got.wait()
            return got
        delay = (got.at - timezone.now()).total_seconds()
        if got.throttled or time.monotonic() + delay > deadline:
            raise Throttled(got)
        time.sleep(max(delay, 0.0))


def after_request(permit: Permit | None) -> None:
    """The request is over: its in-flight slot is given back now, or by the engine's scope
    once the outcome is recorded."""
    if permit is None:
        return
    scope = _current.get()
    if scope is None:
        permit.release()
    else:
        scope.permits.append(permit)


def seconds_until(when: datetime) -> float:
    return max(math.ceil((when - timezone.now()).total_seconds() * 1000) / 1000, 0.0)


# --- what a person sees -------------------------------------------------------------------------


@dataclass
class Waiting:
    """An integration whose work is waiting for its turn: throttled, or draining at its rate."""

    integration: object
    throttled_until: datetime | None
    label: str
    waiting: int


def waiting(now=None) -> list[Waiting]:
    """Integrations throttled now, or limited with operations queued for a later turn, with how
    many approved operations wait for them (the queue page's notice; two small queries)."""
    from django.db.models import Count

    now = now or timezone.now()
    rows = list(
        Integration.objects.filter(
            Q(throttled_until__gt=now) | Q(max_requests_per_second__gt=0) | Q(max_in_flight__gt=0)
        ).order_by("pk")
    )
    if not rows:
        return []
    counts = dict(
        Operation.objects.filter(
            integration__in=rows, state=OperationState.APPROVED, held=False, next_attempt_at__gt=now
        )
        .values_list("integration")
        .annotate(n=Count("pk"))
        .values_list("integration", "n")
    )
    found = []
    for row in rows:
        throttled = (
            row.throttled_until if row.throttled_until and row.throttled_until > now else None
        )
        n = counts.get(row.pk, 0)
        if throttled is not None:
            found.append(Waiting(row, throttled, throttle_label(row, throttled), n))
        elif n:
            rate = row.max_requests_per_second
            pace = f"at most {rate:g} call(s) a second" if rate else f"{row.max_in_flight} at once"
            found.append(Waiting(row, None, f"sending to the {row} at its limit ({pace})", n))
    return found
