"""The personal-data purge: what ``manage.py purge_personal_data`` and its daily django-q2
schedule (``ledger.purge_personal_data``, migration 0011) run.

Redacts contact details, message text and document content on enquiries closed longer than
``PERSONAL_DATA_RETENTION_DAYS`` ago (intake/retention.py), and the ledger's copies (operation
payloads, attempts); then erases people's free-text reasons in the journal's erasable table
(ErasableReason) for those enquiries and, for rows about no enquiry, once they are older than
the retention period. The journal rows themselves (who, when, which action, evidence) are never
changed. Each run is recorded (PurgeRun) and shown on the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from config.context import background_run
from intake.models import Enquiry
from intake.retention import (
    CLOSED_STATES,
    PERSONAL_FIELDS,
    due_for_redaction,
    personal_values,
    redact_enquiry,
    scrub,
)
from ledger.journal import record
from ledger.models import Attempt, ErasableReason, Operation, OperationState, PurgeRun

ACTOR = "system:purge_personal_data"
# An operation still being worked (a notification retried after the CRM write, say) keeps the
# payload it was approved with until it is finished: redacting it would change what it sends.
OPEN_OPERATION_STATES = (
    OperationState.PROPOSED,
    OperationState.APPROVED,
    OperationState.SUBMITTED,
    OperationState.FAILED,
    OperationState.UNKNOWN,
)


@dataclass
class PurgeReport:
    candidates: int = 0
    redacted: int = 0
    skipped: int = 0
    reasons_erased: int = 0
    lines: list[str] = field(default_factory=list)


def redact_operations(enquiry, values) -> dict:
    counts = {"operations": 0, "attempts": 0}
    for op in Operation.objects.filter(enquiry=enquiry):
        # payload_hash stays: it proves what was approved without keeping what it said.
        payload = scrub(op.payload, values)
        result = scrub(op.result, values)
        message = scrub(op.last_error_message, values)
        if (payload, result, message) != (op.payload, op.result, op.last_error_message):
            Operation.objects.filter(pk=op.pk).update(
                payload=payload, result=result, last_error_message=message
            )
            counts["operations"] += 1
    for attempt in Attempt.objects.filter(operation__enquiry=enquiry):
        summary = scrub(attempt.request_summary, values)
        body = scrub(attempt.response_body, values)
        error = scrub(attempt.error_message, values)
        if (summary, body, error) != (
            attempt.request_summary,
            attempt.response_body,
            attempt.error_message,
        ):
            attempt.request_summary, attempt.response_body = summary, body
            attempt.error_message = error
            attempt.save(update_fields=["request_summary", "response_body", "error_message"])
            counts["attempts"] += 1
    return counts


def redact_one(pk, *, now, days, dry_run, say) -> str | None:
    with transaction.atomic():
        # Lock, then re-check: a second run (or a concurrent one) finds it already done.
        enquiry = Enquiry.objects.select_for_update().get(pk=pk)
        due = (
            enquiry.state in CLOSED_STATES
            and enquiry.redacted_at is None
            and enquiry.closed_at is not None
            and enquiry.closed_at < now - timedelta(days=days)
        )
        if not due:
            return None
        open_ops = list(
            Operation.objects.filter(enquiry=enquiry, state__in=OPEN_OPERATION_STATES)
            .order_by("created_at")
            .values_list("action", "state")
        )
        if open_ops:
            listed = ", ".join(f"{action} {state}" for action, state in open_ops)
            say(f"  {enquiry.reference}: skipped, operations open ({listed})")
            return "skipped"
        if dry_run:
            say(f"  {enquiry.reference}: would redact (closed {enquiry.closed_at:%Y-%m-%d})")
            return "redacted"
        values = personal_values(enquiry)
        counts = redact_enquiry(enquiry, now=now, values=values)
        counts.update(redact_operations(enquiry, values))
        record(
            enquiry,
            "intake.enquiry.redacted",
            actor=ACTOR,
            reason=f"Retention: closed more than {days} days ago.",
            evidence={
                "closed_at": enquiry.closed_at.isoformat(),
                "retention_days": days,
                "fields": list(PERSONAL_FIELDS),
                **counts,
            },
        )
    touched = ", ".join(f"{n} {what}" for what, n in counts.items() if n) or "fields only"
    say(f"  {enquiry.reference}: redacted ({touched})")
    return "redacted"


def erase_reasons(*, now, days) -> int:
    """Empty people's reasons about redacted enquiries, and about no enquiry once older than
    the retention period. The journal rows stay as they are (the trigger refuses any change)."""
    due = ErasableReason.objects.filter(erased_at__isnull=True).filter(
        Q(entry__enquiry__redacted_at__isnull=False)
        | Q(entry__enquiry__isnull=True, entry__at__lt=now - timedelta(days=days))
    )
    return due.update(text="", erased_at=now)


def purge(*, now=None, dry_run=False, say=lambda line: None) -> PurgeReport:
    now = now or timezone.now()
    days = settings.PERSONAL_DATA_RETENTION_DAYS
    report = PurgeReport()
    candidates = list(due_for_redaction(now=now, retention_days=days).values_list("pk"))
    report.candidates = len(candidates)
    for (pk,) in candidates:
        outcome = redact_one(pk, now=now, days=days, dry_run=dry_run, say=say)
        if outcome == "redacted":
            report.redacted += 1
        elif outcome == "skipped":
            report.skipped += 1
    if not dry_run:
        report.reasons_erased = erase_reasons(now=now, days=days)
    return report


@background_run("purge")
def scheduled_purge() -> dict:
    """The daily schedule's run: purge, and keep what it did for the dashboard."""
    started = timezone.now()
    report = purge(now=started)
    PurgeRun.objects.create(
        started_at=started,
        finished_at=timezone.now(),
        ran_by="schedule",
        retention_days=settings.PERSONAL_DATA_RETENTION_DAYS,
        candidates=report.candidates,
        redacted=report.redacted,
        skipped=report.skipped,
        reasons_erased=report.reasons_erased,
    )
    return {"redacted": report.redacted, "reasons_erased": report.reasons_erased}
