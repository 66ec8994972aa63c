"""The drill's cases: one per row of the failure table in docs/drill.md.

Each case sends real signed events to the real intake endpoint, lets real workers do the work,
injects the failure at the real destination (or kills the real worker), then checks the ledger
AND counts the destination's own records by reference. A case that ends with drill work left in
a person's queue resolves it afterwards as a person would (with a reason), so the console's
queue is not left full of drill items.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.drill.cases.appointments import (
    appointments_changed,
    appointments_slow,
    appointments_stale,
    appointments_unavailable,
)
from harness.drill.cases.changes import (
    category_corrected,
    changed_after_approval,
    integration_paused,
)
from harness.drill.cases.conversation import resident_replies
from harness.drill.cases.documents import (
    document_access_removed,
    document_changed,
    document_correction_kept,
    document_timeout,
)
from harness.drill.cases.email import email_busy, email_no_reply, email_outage, email_refused
from harness.drill.cases.failures import (
    destination_unavailable,
    lookup_unavailable,
    notification_fails,
    timeout_after_commit,
    worker_killed,
)
from harness.drill.cases.intake import (
    duplicate_deliveries,
    invalid_fields,
    uncertain_classification,
    valid_new_event,
)
from harness.drill.results import CaseResult
from harness.drill.runner import Drill


@dataclass(frozen=True)
class Spec:
    key: str
    name: str
    expected: str
    run: Callable[[Drill, CaseResult], None]
    needs_faults: bool = False
    # The integrations whose destination the case writes to or counts at (the report names
    # which destination each one was: against a real CRM, only the CRM is real).
    uses: tuple[str, ...] = ("crm",)


CASES = [
    Spec(
        "valid",
        "valid new event",
        "one intake, one acknowledged destination record",
        valid_new_event,
    ),
    Spec(
        "duplicate",
        "same event delivered twice (and 50 times at once)",
        "the existing result; one destination record",
        duplicate_deliveries,
    ),
    Spec(
        "invalid",
        "invalid fields",
        "422 with actionable errors; nothing stored as an enquiry",
        invalid_fields,
    ),
    Spec(
        "unavailable",
        "destination unavailable",
        "intake kept; recoverable state; bounded retries; visible in queue",
        destination_unavailable,
        needs_faults=True,
    ),
    Spec(
        "timeout",
        "timeout after the destination committed",
        "unknown, reconciled to confirmed; one record",
        timeout_after_commit,
        needs_faults=True,
    ),
    Spec(
        "killed",
        "worker killed after the remote write succeeded",
        "reconciled on restart; one record",
        worker_killed,
    ),
    Spec(
        "no-lookup",
        "destination cannot be looked up",
        "reconciliation queue, not a retry",
        lookup_unavailable,
        needs_faults=True,
    ),
    Spec(
        "doc-access",
        "document access removed",
        "access failure; no invented fields",
        document_access_removed,
        uses=("documents",),
    ),
    Spec(
        "doc-changed",
        "the document changed between reads",
        "a new version, read as itself; the old version's fields never made up",
        document_changed,
        uses=("documents",),
    ),
    Spec(
        "doc-timeout",
        "the document store does not answer in time",
        "asked again within the retry budget; then read",
        document_timeout,
        uses=("documents",),
    ),
    Spec(
        "doc-corrected",
        "a reviewer's correction, then the same version read again",
        "the same fields read; the correction kept",
        document_correction_kept,
        uses=("documents",),
    ),
    Spec(
        "changed",
        "enquiry changed after approval",
        "renewed review before any write",
        changed_after_approval,
    ),
    Spec("uncertain", "uncertain classification", "review queue", uncertain_classification),
    Spec(
        "notify-fails",
        "CRM succeeds, notification fails",
        "one CRM record; notification open separately",
        notification_fails,
        needs_faults=True,
        uses=("crm", "notify"),
    ),
    Spec(
        "email-no-reply",
        "e-mail: the relay's reply lost after the final dot",
        "one message at the relay; unknown; a person with an owner, never resent",
        email_no_reply,
        uses=("notify:smtp",),
    ),
    Spec(
        "email-refused",
        "e-mail: the relay refuses the recipient (550)",
        "failed as invalid with the relay's words; no message; not retried",
        email_refused,
        uses=("notify:smtp",),
    ),
    Spec(
        "email-busy",
        "e-mail: the relay answers 421",
        "retried; one message at the relay; confirmed",
        email_busy,
        uses=("notify:smtp",),
    ),
    Spec(
        "email-outage",
        "e-mail: the relay is down, then back",
        "every message waits and is tried again by itself; each sent once; nobody involved",
        email_outage,
        uses=("notify:smtp",),
    ),
    Spec(
        "resident-replies",
        "a resident reply by e-mail and by the page",
        "each lands on the same enquiry exactly once, even delivered twice; no second enquiry",
        resident_replies,
        uses=("notify:smtp",),
    ),
    Spec(
        "corrected",
        "category corrected before a retry",
        "the retry sends the corrected, approved revision",
        category_corrected,
        needs_faults=True,
    ),
    Spec(
        "paused",
        "integration paused",
        "intake kept, no writes, backlog visible; resume reviews it",
        integration_paused,
        needs_faults=True,
    ),
    Spec(
        "appointments-slow",
        "appointments: the calendar is slow",
        "no answer in time: read again within the budget; the slots carry their as-of",
        appointments_slow,
        uses=("appointments",),
    ),
    Spec(
        "appointments-unavailable",
        "appointments: the calendar is unavailable",
        "bounded retries, then failed, visible in the queue with an owner; nothing invented",
        appointments_unavailable,
        uses=("appointments",),
    ),
    Spec(
        "appointments-stale",
        "appointments: the slots are stale",
        "re-read; when that fails, shown as stale with their age, never as current",
        appointments_stale,
        uses=("appointments",),
    ),
    Spec(
        "appointments-changed",
        "appointments: the calendar changed between two reads",
        "a new version; the taken slot is no longer offered",
        appointments_changed,
        uses=("appointments",),
    ),
]
