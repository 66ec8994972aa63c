"""The queue of work that needs a person: what is in it, one page of it, and who acts on it.

- ``sources``: what is in the queue, with which columns, state and due time: one description,
  as SQL branches, that the page and every other reader (escalation, the dashboard, bulk
  actions, the drill) read alike;
- ``filters``: what a person asked for (filters, sort, one group of failures);
- ``policies``: the response policies (owner, period) each branch falls under;
- ``paging``: one page, ordered and sliced in PostgreSQL with a constant query count;
- ``rows``: the page's rows with their objects, owners and next actions;
- ``failures``: what failed the same way, counted.
"""

from recovery.queue.failures import failure_groups
from recovery.queue.filters import SORTS, Filters, GroupKey
from recovery.queue.paging import PAGE_SIZE, page
from recovery.queue.rows import held_count
from recovery.queue.sources import (
    KIND_ANSWER,
    KIND_ENQUIRY,
    KIND_INTEGRATION,
    KIND_OPERATION,
    all_rows,
    whole,
)

__all__ = [
    "KIND_ANSWER",
    "KIND_ENQUIRY",
    "KIND_INTEGRATION",
    "KIND_OPERATION",
    "PAGE_SIZE",
    "SORTS",
    "Filters",
    "GroupKey",
    "all_rows",
    "failure_groups",
    "held_count",
    "page",
    "whole",
]
