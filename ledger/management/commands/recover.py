"""`python manage.py recover`: run the sweeper once and say what it did."""

from django.core.management.base import BaseCommand

from intake.workflow import system_actor
from ledger.sweeper import sweep


class Command(BaseCommand):
    help = (
        "Find operations left in flight by a crash, reconcile stale `submitted` ones and "
        "re-enqueue approved ones whose task was lost; print what was done."
    )

    def handle(self, *args, **options):
        report = sweep(actor=system_actor("recover"))
        self.stdout.write(report.summary())
        for label, ids in report.as_dict().items():
            for op_id in ids:
                self.stdout.write(f"  {label.replace('_', ' ')}: {op_id}")
        if not report:
            self.stdout.write(self.style.SUCCESS("Nothing to recover."))
