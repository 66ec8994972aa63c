"""`python manage.py check_integration crm`: is the destination ready for Handover's work?

Calls the destination the way the integration's kind talks to it (reachable, credentials,
required configuration such as BottleCRM's ``external_ref`` custom field, the look-up), prints
each problem in plain words and exits non-zero when there is one. Nothing is written there.
"""

from django.core.management.base import BaseCommand, CommandError

from config.destinations import shown
from intake.workflow import system_actor
from ledger import services
from ledger.models import Integration, kind_of


class Command(BaseCommand):
    help = (
        "Check an integration's destination before it is used: reachable, credentials "
        "accepted, configured as its kind needs. Exit status 1 when anything is wrong."
    )

    def add_arguments(self, parser):
        names = [name for name, _label in Integration.NAMES]
        # No ``choices`` here: argparse checks an empty ``nargs="*"`` list against them and
        # refuses ``--all`` alone ("invalid choice: []"); the names are checked in handle().
        parser.add_argument("names", nargs="*", metavar="name")
        parser.add_argument(
            "--all", action="store_true", help=f"check every integration ({', '.join(names)})"
        )

    def handle(self, *args, names=None, **options):
        if options["all"]:
            names = [name for name, _label in Integration.NAMES]
        known = [name for name, _label in Integration.NAMES]
        if not names:
            raise CommandError(f"Name an integration ({', '.join(known)}) or --all.")
        unknown = [name for name in names if name not in known]
        if unknown:
            raise CommandError(
                f"No integration called {unknown[0]!r}: use one of {', '.join(known)}, or --all."
            )
        failed = 0
        for name in names:
            row = services.integration(name)
            kind = kind_of(row)
            self.stdout.write(f"{row} ({name}): {kind.label} at {shown(row.base_url)}")
            problems = services.check_integration(name, actor=system_actor("check_integration"))
            if problems:
                failed += 1
                for problem in problems:
                    self.stdout.write(self.style.ERROR(f"  problem: {problem}"))
            else:
                self.stdout.write(self.style.SUCCESS("  ready: nothing wrong found"))
        if failed:
            # SystemExit rather than CommandError: the problems are printed above already.
            raise SystemExit(1)
