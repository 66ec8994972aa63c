"""Redact personal data on closed enquiries past the retention period (run daily by the
django-q2 schedule ``ledger.purge_personal_data``; this is the same run by hand).

The work is ledger.purge's: it redacts the ledger's copies too (operation payloads and
attempts), erases people's reasons kept beside the journal, and writes the journal rows.
"""

from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ledger.models import PurgeRun
from ledger.purge import purge


def _parse_now(value):
    if value is None:
        return timezone.now()
    parsed = parse_datetime(value)
    if parsed is None:
        raise CommandError(f"--now {value!r} is not an ISO date-time (2026-11-29T08:00:00Z)")
    if timezone.is_naive(parsed):
        parsed = timezone.make_aware(parsed)
    return parsed


class Command(BaseCommand):
    help = (
        "Redact personal fields (contact details, message, document content) on enquiries "
        "closed longer than PERSONAL_DATA_RETENTION_DAYS, and erase people's reasons about "
        "them; keep references, hashes, states and the journal."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Show what would change.")
        parser.add_argument(
            "--now", help="Act as if it were this ISO date-time (default: the current time)."
        )

    def handle(self, *args, dry_run=False, now=None, **options):
        now = _parse_now(now)
        days = settings.PERSONAL_DATA_RETENTION_DAYS
        started = timezone.now()
        report = purge(now=now, dry_run=dry_run, say=self.stdout.write)
        if not dry_run:
            PurgeRun.objects.create(
                started_at=started,
                finished_at=timezone.now(),
                ran_by="manage.py purge_personal_data",
                retention_days=days,
                candidates=report.candidates,
                redacted=report.redacted,
                skipped=report.skipped,
                reasons_erased=report.reasons_erased,
            )
        cutoff = now - timedelta(days=days)
        verb = "Would redact" if dry_run else "Redacted"
        summary = (
            f"{verb} {report.redacted} of {report.candidates} enquiries closed before "
            f"{cutoff.isoformat(timespec='minutes')} (retention {days} days)"
        )
        if report.skipped:
            summary += f"; skipped {report.skipped} with operations still open"
        if report.reasons_erased:
            summary += f"; erased {report.reasons_erased} reason(s) in the journal"
        self.stdout.write(self.style.SUCCESS(summary + "."))
