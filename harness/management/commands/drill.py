"""`python manage.py drill`: run the design's failure matrix for real and report the evidence.

Exit code 0 only when every case passed. See docs/drill.md. The drill is test equipment
(harness/drill/); its evidence is kept through the product's report API (recovery.drill.report).
"""

import getpass
import socket
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from harness.drill.cases import CASES
from harness.drill.processes import DrillError
from harness.drill.runner import DESTINATIONS, Drill, install_stop_handlers
from recovery.drill import report


def default_runner() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class Command(BaseCommand):
    help = "Run every case of the drill table against the configured integration (or a sandbox)."

    def add_arguments(self, parser):
        parser.add_argument("--json", dest="json_path", type=Path, help="write the JSON report")
        parser.add_argument("--html", dest="html_path", type=Path, help="write the HTML report")
        parser.add_argument(
            "--destination",
            choices=DESTINATIONS,
            help="run against a destination the drill starts itself instead of the configured "
            "CRM: 'sandbox', or 'bottlecrm' (a real BottleCRM, through the fault proxy)",
        )
        parser.add_argument(
            "--sandbox",
            action="store_true",
            help="the same as --destination sandbox",
        )
        parser.add_argument(
            "--case", action="append", default=[], help="run only this case (key; repeatable)"
        )
        parser.add_argument("--by", default="", help="who runs the drill (default: user@host)")

    def handle(self, *args, json_path, html_path, destination, sandbox, case, by, **options):
        if sandbox and destination not in (None, "sandbox"):
            raise CommandError("--sandbox and --destination bottlecrm contradict each other.")
        specs = [s for s in CASES if not case or s.key in case]
        unknown = set(case) - {s.key for s in CASES}
        if unknown:
            raise CommandError(f"No such case: {', '.join(sorted(unknown))}.")
        _require_migrated()
        _require_no_live_workers()
        restore_signals = install_stop_handlers()
        started_at = timezone.now()
        drill = Drill(out=self.stdout, force_sandbox=sandbox, destination=destination)
        results = []
        try:
            self.stdout.write(
                f"Drill {drill.run_id}: starting the destination, web server, workers"
            )
            drill.setup()
            self.stdout.write(f"Against {drill.destination.describe()}")
            for spec in specs:
                began = time.monotonic()
                result = drill.run_case(spec)
                results.append(result)
                verdict = self.style.SUCCESS("pass") if result.passed else self.style.ERROR("FAIL")
                self.stdout.write(
                    f"  {verdict}  {spec.name} ({time.monotonic() - began:.1f}s): "
                    f"{result.as_dict()['observed']}"
                )
        except DrillError as exc:
            raise CommandError(f"The drill could not start: {exc}") from None
        finally:
            integration = drill.destination.describe() if drill.destination else "not started"
            destination_facts = drill.describe_destination()
            drill.teardown()
            restore_signals()
        finished_at = timezone.now()
        data = report.build(
            integration=integration,
            destination=destination_facts,
            started_at=started_at,
            finished_at=finished_at,
            cases=results,
            run_id=drill.run_id,
            ran_by=by or default_runner(),
        )
        report.write(data, json_path=drill.dir / "report.json", html_path=drill.dir / "report.html")
        report.write(data, json_path=json_path, html_path=html_path)
        report.save(data)
        passed = sum(1 for r in results if r.passed)
        seconds = (finished_at - started_at).total_seconds()
        summary = f"{passed} of {len(results)} cases passed in {seconds:.0f}s"
        if passed != len(results) or not results:
            raise CommandError(f"Drill failed: {summary}. Report: {drill.dir / 'report.html'}")
        self.stdout.write(self.style.SUCCESS(f"Drill passed: {summary}."))


def _require_migrated():
    """The drill records its evidence in this database: say so plainly if it is not ready."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        raise CommandError(
            f"The database has {len(pending)} unapplied migration(s): run "
            "`python manage.py migrate` first (make drill does)."
        )


def _require_no_live_workers():
    """The drill runs its own workers on this database, crashes them on purpose and makes
    enquiries: beside a live cluster it could not tell its crash from theirs (a live worker
    takes the drill's task), and operators would see its enquiries in the console. So it runs
    on a database of its own, or not at all."""
    from django.db import connection

    from ledger.worker import workers_on_this_database

    live = workers_on_this_database()
    if live:
        raise CommandError(
            f"Refusing to run: a django-q2 cluster is working on this database "
            f"({connection.settings_dict.get('NAME')}; {len(live)} connection(s) from "
            f"{', '.join(sorted(set(live))[:5])}). It would take the drill's tasks, so a crash "
            "case could not tell its crash from the live cluster's work, and the drill's "
            "enquiries would show to operators in the console. Stop the cluster (make run) or "
            "run the drill against a database of its own: DATABASE_URL=<a new database> "
            "python manage.py migrate && DATABASE_URL=<the same> python manage.py drill "
            "(docs/drill.md)."
        )
