"""The response policies (owner, period) of the queue's rows, read once per reading."""

from __future__ import annotations

from recovery.models import ResponsePolicy


class Policies:
    """Every ResponsePolicy row, loaded once (one query; there are a handful).

    The most specific row wins: queue + integration, then queue alone, then integration alone,
    then the default row (both blank). The queue is read in branches that each fall under one
    (queue, integration), so ``value()`` decides each branch's period and owner in Python and
    writes them into its SQL as constants: no query reads ``recovery_responsepolicy`` per row.
    """

    COLUMNS = ("queue", "integration_id", "response_period", "owner_id")

    def __init__(self, rows: list[dict]):
        self.rows = sorted(rows, key=lambda p: (not p["queue"], p["integration_id"] is None))

    @classmethod
    def load(cls) -> Policies:
        return cls(list(ResponsePolicy.objects.order_by().values(*cls.COLUMNS)))

    def value(self, queue: str, integration_id: int | None, column: str):
        for p in self.rows:
            if p["queue"] in ("", queue) and p["integration_id"] in (None, integration_id):
                return p[column]
        return None
