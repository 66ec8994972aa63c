"""What failed the same way: the queue's operations grouped by GroupKey, the largest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from ledger.models import OperationState
from recovery.queue.filters import Filters, GroupKey

GROUPS_SHOWN = 8


@dataclass
class FailureGroup:
    """One line of "what failed the same way": its key, how many, since when."""

    key: GroupKey
    count: int
    oldest: datetime

    @property
    def label(self) -> str:
        from recovery.words import group_label

        return group_label(self.key)

    @property
    def param(self) -> str:
        return str(self.key)


def failure_groups(filters: Filters, *, least: int = 2) -> list[FailureGroup]:
    """Operations in the queue grouped by how they failed (GroupKey), the largest first: one
    query, counted from the index ``operation_groups`` alone. Only groups of ``least`` or more
    are worth a line; a filter on a queue of enquiries or a paused system leaves none."""
    if filters.queue and filters.queue not in (OperationState.UNKNOWN, OperationState.FAILED):
        return []
    if filters.group:
        return []
    where, params = ["o.state IN (%s, %s)"], [OperationState.UNKNOWN, OperationState.FAILED]
    if filters.queue:
        where.append("o.state = %s")
        params.append(filters.queue)
    if filters.integration:
        where.append("o.integration_id = (SELECT id FROM ledger_integration WHERE name = %s)")
        params.append(filters.integration)
    # Grouped in the index's own column order (operation_groups): PostgreSQL aggregates its
    # entries as it reads them, without a hash table or a join per row; the few groups left
    # are joined to their integration's name after.
    sql = (
        "SELECT i.name, g.state, g.attention, g.last_error_class, g.last_error_status, g.n, "
        "g.oldest FROM (SELECT o.state, o.integration_id, o.attention, o.last_error_class, "
        "o.last_error_status, COUNT(*) AS n, MIN(o.state_changed_at) AS oldest "
        f"FROM ledger_operation o WHERE {' AND '.join(where)} "
        "GROUP BY o.state, o.integration_id, o.attention, o.last_error_class, "
        "o.last_error_status HAVING COUNT(*) >= %s) g "
        "LEFT JOIN ledger_integration i ON i.id = g.integration_id "
        "ORDER BY g.n DESC, g.oldest LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, least, GROUPS_SHOWN])
        rows = cursor.fetchall()
    return [
        FailureGroup(GroupKey(name, state, attention, error_class, status), n, oldest)
        for name, state, attention, error_class, status, n, oldest in rows
    ]
