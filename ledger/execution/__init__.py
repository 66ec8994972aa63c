"""The engine: execute an approved operation, reconcile an unknown one.

Executing, in order (docs/integrations.md, "Workers and timing"):

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

The package: ``locking`` (lock_operation, read_operation), ``executing`` (claim, call, record
the outcome), ``reconciling`` (look up, record_lookup and its ``Lookup`` outcomes), and
``outcomes`` (what both record: the attempt's ending, confirmed, failed, unknown, held).
Callers import from here: ``from ledger import execution``.
"""

from ledger.execution.executing import claim, execute, record_failure, record_success
from ledger.execution.locking import lock_operation, read_operation
from ledger.execution.outcomes import hold, schedule_reconcile, to_unknown
from ledger.execution.reconciling import Lookup, reconcile, record_lookup

__all__ = [
    "Lookup",
    "claim",
    "execute",
    "hold",
    "lock_operation",
    "read_operation",
    "reconcile",
    "record_failure",
    "record_lookup",
    "record_success",
    "schedule_reconcile",
    "to_unknown",
]
