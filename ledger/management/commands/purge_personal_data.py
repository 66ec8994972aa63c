"""Redact personal data on closed enquiries past the retention period (run it daily).

It lives with the ledger because it redacts the ledger's copies too (operation payloads and
attempts) and writes the journal row; intake's part is intake/retention.py.
"""

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

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
from ledger.models import Attempt, Op, Operation

ACTOR = "system:purge_personal_data"
# An operation still being worked (a notification retried after the CRM write, say) keeps the
# payload it was approved with until it is finished: redacting it would change what it sends.
OPEN_OPERATION_STATES = (Op.PROPOSED, Op.APPROVED, Op.SUBMITTED, Op.FAILED, Op.UNKNOWN)


def _parse_now(value):
    if value is None:
        return timezone.now()
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"--now {value!r} is not an ISO date-time (2026-11-29T08:00:00Z)")
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


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


class Command(BaseCommand):
    help = (
        "Redact personal fields (contact details, message, document content) on enquiries "
        "closed longer than PERSONAL_DATA_RETENTION_DAYS; keep references, hashes, states "
        "and the journal."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Show what would change.")
        parser.add_argument(
            "--now", help="Act as if it were this ISO date-time (default: the current time)."
        )

    def handle(self, *args, dry_run=False, now=None, **options):
        now = _parse_now(now)
        days = settings.PERSONAL_DATA_RETENTION_DAYS
        candidates = list(due_for_redaction(now=now, retention_days=days).values_list("pk"))
        redacted = skipped = 0
        for (pk,) in candidates:
            outcome = self.redact_one(pk, now=now, days=days, dry_run=dry_run)
            if outcome == "redacted":
                redacted += 1
            elif outcome == "skipped":
                skipped += 1
        cutoff = now - timedelta(days=days)
        verb = "Would redact" if dry_run else "Redacted"
        summary = (
            f"{verb} {redacted} of {len(candidates)} enquiries closed before "
            f"{cutoff.isoformat(timespec='minutes')} (retention {days} days)"
        )
        if skipped:
            summary += f"; skipped {skipped} with operations still open"
        self.stdout.write(self.style.SUCCESS(summary + "."))

    def redact_one(self, pk, *, now, days, dry_run):
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
                self.stdout.write(f"  {enquiry.reference}: skipped, operations open ({listed})")
                return "skipped"
            if dry_run:
                self.stdout.write(
                    f"  {enquiry.reference}: would redact (closed {enquiry.closed_at:%Y-%m-%d})"
                )
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
        self.stdout.write(f"  {enquiry.reference}: redacted ({touched})")
        return "redacted"
