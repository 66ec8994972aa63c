"""Reads' share of the workers: a read never takes the worker that writes and messages need.

A read (a document's text, a calendar's busy time) holds its worker for as long as the
destination takes to answer and Handover takes to read the answer, however well both are bounded;
eight of one enquiry's documents once held every worker for minutes while an unrelated
acknowledgement waited. So, when the engine claims a read (ledger.execution.claim), it asks
admission() first; a read in flight is a read operation ``submitted`` with a live lease (claimed,
its outcome not yet recorded), counted in PostgreSQL across every worker of every cluster:

- at most READS_MAX_IN_FLIGHT reads in flight from all integrations together (by default one
  fewer than a cluster's workers, so that writes and messages always find one);
- at most the integration's ``read_share`` from that integration (empty: READS_MAX_IN_FLIGHT);
- at most READS_PER_ENQUIRY reads of one enquiry, so that one enquiry's eight documents take
  turns with everyone else's instead of all at once.

A read turned away goes back on the queue for COME_BACK_SECONDS later, unchanged: no attempt, no
transition, its retry budget untouched (as ledger.limits turns away a call for a rate). The
claims of reads are taken one at a time (a transaction-scoped advisory lock, held from the count
to the claim's commit, a few statements), so two workers never both take the last place.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection

# Taken by every claim of a read, after its enquiry's and operation's row locks and before the
# count: held to the claim's commit, so each claim counts every claim committed before it.
ADVISORY_LOCK_KEY = 0x68726561  # "hrea"
COME_BACK_SECONDS = 1.0

_COUNT_SQL = (
    "SELECT COUNT(*), COUNT(*) FILTER (WHERE integration_id = %s), "
    "COUNT(*) FILTER (WHERE enquiry_id = %s) FROM ledger_operation "
    "WHERE state = 'submitted' AND action = ANY(%s) AND lease_expires_at > %s"
)


@dataclass
class Wait:
    """No place for this read now: come back at ``at``; ``why`` in words, for the log."""

    at: object
    why: str


def max_in_flight() -> int:
    return int(getattr(settings, "READS_MAX_IN_FLIGHT", 1))


def per_enquiry() -> int:
    return int(getattr(settings, "READS_PER_ENQUIRY", 2))


def share(integration) -> int:
    """Reads in flight the integration may have: its read share, never more than the total."""
    total = max_in_flight()
    own = getattr(integration, "read_share", None)
    return min(own, total) if own else total


def in_flight(actions, *, integration_id=None, enquiry_id=None, now) -> tuple[int, int, int]:
    """(reads in flight in all, from the integration, of the enquiry)."""
    with connection.cursor() as cursor:
        cursor.execute(_COUNT_SQL, [integration_id, enquiry_id, list(actions), now])
        return tuple(cursor.fetchone())


def admission(op, *, actions, now) -> Wait | None:
    """Inside the claim's transaction: None when ``op`` (a read, one of ``actions``) may be
    claimed now (the lock taken here is held until that claim commits), else when to come back."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [ADVISORY_LOCK_KEY])
    total, here, mine = in_flight(
        actions, integration_id=op.integration_id, enquiry_id=op.enquiry_id, now=now
    )
    at = now + timedelta(seconds=COME_BACK_SECONDS)
    if total >= max_in_flight():
        return Wait(at, f"{total} read(s) in flight in all (at most {max_in_flight()})")
    if op.integration is not None and here >= share(op.integration):
        return Wait(at, f"{here} read(s) in flight from the {op.integration} (its share)")
    if op.enquiry_id is not None and mine >= per_enquiry():
        return Wait(at, f"{mine} read(s) of this enquiry in flight (at most {per_enquiry()})")
    return None
