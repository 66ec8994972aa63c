"""SQLite persistence for the sandbox: records, faults, capabilities and counters.

Everything lives in one SQLite file so that a restarted sandbox process sees exactly what the
previous one committed: records, but also pending faults, capabilities and request counters.
A drill can therefore arm a fault, kill the sandbox and find the fault still armed.

- ``schema``: the file's tables and version;
- ``base``: connections and transactions (see there for the concurrency model), idempotent
  creates;
- ``control``: capabilities, faults, counters, the rate limit, reset;
- ``crm``, ``notify``, ``docs``: each service's records.

``Store`` is all of them on one file. Standard library only: this package must run without
Django.
"""

from __future__ import annotations

from typing import Any

from sandbox.store.base import Created, IdempotencyKeyReusedError, iso, utc_now
from sandbox.store.control import (
    DEFAULT_CAPABILITIES,
    RATE_LIMIT_SCOPES,
    RATE_LIMITED,
    ControlStore,
    Fault,
    control_stats,
)
from sandbox.store.crm import CrmStore, crm_stats
from sandbox.store.docs import DocsStore, docs_stats
from sandbox.store.notify import NotifyStore, notify_stats

__all__ = [
    "DEFAULT_CAPABILITIES",
    "RATE_LIMITED",
    "RATE_LIMIT_SCOPES",
    "Created",
    "Fault",
    "IdempotencyKeyReusedError",
    "Store",
    "iso",
    "utc_now",
]


class Store(ControlStore, CrmStore, NotifyStore, DocsStore):
    def stats(self) -> dict[str, Any]:
        # One read transaction: the counts of every service and the counters agree.
        with self._read() as conn:
            return {
                "crm": crm_stats(conn),
                "notify": notify_stats(conn),
                "docs": docs_stats(conn),
                **control_stats(conn),
            }
