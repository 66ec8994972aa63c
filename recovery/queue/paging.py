"""One page of the queue, ordered and sliced in PostgreSQL with a constant number of queries.

The page is the union of the queue's branches (sources.branches), each read oldest first
with LIMIT offset + size + 1: a page costs the same whatever the queue's length. Its rows'
objects are then fetched in one query per kind (rows.attach, never one per row).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils import timezone

from recovery.models import Queue
from recovery.queue.filters import Filters
from recovery.queue.policies import Policies
from recovery.queue.rows import Row, attach
from recovery.queue.sources import Branch, branches, fetch, integration_rows, union

PAGE_SIZE = 50
# The page counts exactly up to here, then says "10,000+": counting every row costs a read of
# every row, and no one pages through ten thousand items (they filter).
COUNT_CAP = 10_000


@dataclass
class Page:
    rows: list[Row]
    number: int
    count: int  # exact up to COUNT_CAP; with ``more``, at least this many wait
    size: int = PAGE_SIZE
    more: bool = False
    further: bool = False  # a row exists after this page

    @property
    def pages(self) -> int | None:
        return None if self.more else max(1, -(-self.count // self.size))

    @property
    def count_label(self) -> str:
        return f"{self.count:,}+" if self.more else f"{self.count:,}"

    @property
    def has_next(self) -> bool:
        return self.further

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def _late_bound_sorted(rows: list[dict], wanted: int, sort: str, period):
    """As ``_late_bound`` under a chosen sort. The late rows are enquiries: no attempt of their
    own (they sort after every operation that has one), due at since + ``period``."""
    if len(rows) < wanted:
        return None
    last = rows[wanted - 1]
    if sort == "age":
        return last["q_since"]
    if sort == "due":
        if period is None:  # their due is NULL: after every row that has one
            return False if last["q_due"] is not None else last["q_since"]
        return None if last["q_due"] is None else last["q_due"] - period
    # "attempt"
    return False if last["q_attempt"] is not None else last["q_since"]


def _late_bound(rows: list[dict], wanted: int, now: datetime, period):
    """The newest ``q_since`` a customer-affecting row under ``period`` can have and still come
    before the last of ``rows`` (the first pass, in the queue's order): None for no bound,
    False when none can. A bound may let in a row too many, never leave one out."""
    if len(rows) < wanted:
        return None  # the first pass did not fill the page: every one may be on it
    last = rows[wanted - 1]
    overdue_before = now - period if period is not None else None
    if last["q_overdue"]:
        # Only an overdue row comes before an overdue one; before an overdue customer-affecting
        # row, only an older one.
        if overdue_before is None:
            return False
        return min(last["q_since"], overdue_before) if last["q_customer"] else overdue_before
    if last["q_customer"]:
        # Overdue, or older than a customer-affecting row that is not overdue.
        return max(last["q_since"], overdue_before) if overdue_before else last["q_since"]
    return None  # any customer-affecting row comes before an internal one that is not overdue


def _count(parts: list[Branch]) -> int:
    """The queue's length under the filters, counted up to COUNT_CAP + 1."""
    sql, params = union([b.count_sql() for b in parts])
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM ({sql} LIMIT %s) AS counted", [*params, COUNT_CAP + 1]
        )
        return cursor.fetchone()[0]


def page(filters: Filters, number: int = 1, *, user=None, now=None, size=PAGE_SIZE) -> Page:
    """One page of the queue in a constant number of queries, whatever the queue's length.

    Policies and integrations (2 queries), a count up to COUNT_CAP (1), the page's rows (2:
    without, then with the stuck enquiries, see ``sources.ENQUIRY_QUEUES``), then one query
    per kind of row shown and one for the owners (``attach``). No query reads every waiting
    operation: each branch gives at most offset + size + 1 rows, oldest first, and the outer
    query puts them in the queue's order and takes the page.
    """
    now = now or timezone.now()
    policies = Policies.load()
    parts = branches(filters, now, policies, integration_rows())
    if not parts:
        return Page(rows=[], number=1, count=0, size=size)
    count = _count(parts)
    more = count > COUNT_CAP
    count = min(count, COUNT_CAP)
    if not more:  # past the end: the last page (the view says so)
        number = min(number, max(1, -(-count // size)))
    number = max(1, number)
    start = (number - 1) * size
    end = start + size + 1  # one more than the page: is there a next page?

    ordered = [b.sql(limit=end) for b in parts if not b.late]
    late = [b for b in parts if b.late]
    raw = fetch(ordered, filters.sort, offset=start, limit=end - start) if ordered else []
    if late:
        # First pass without the stuck enquiries; the row that closes it bounds how old one of
        # them must be to get onto the page, so the join reads only those.
        period = policies.value(Queue.SUBMISSION_UNKNOWN, None, "response_period")
        if not ordered:
            bound = None
        elif filters.sort:
            bound = _late_bound_sorted(raw, end - start, filters.sort, period)
        else:
            bound = _late_bound(raw, end - start, now, period)
        # Run even when none can reach the page (bound False): the page's query count stays
        # the same whatever the queue holds.
        chosen = ordered if bound is False else ordered + [b.sql(since_before=bound) for b in late]
        raw = fetch(chosen, filters.sort, offset=start, limit=end - start)
    further = len(raw) > size
    rows = [
        Row(
            kind=r["q_kind"],
            key=r["q_key"],
            queue=r["q_queue"],
            since=r["q_since"],
            owner_id=r["q_owner"],
            integration=r["q_integration"],
            customer=bool(r["q_customer"]),
            due=r["q_due"],
            overdue=bool(r["q_overdue"]),
            attempt=r["q_attempt"],
        )
        for r in raw[:size]
    ]
    attach(rows, user=user)
    return Page(rows=rows, number=number, count=count, size=size, more=more, further=further)
