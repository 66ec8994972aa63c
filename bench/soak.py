"""The soak: a bad day, for real, then count what was lost.

    python bench/soak.py --events 1000 --duplicate-rate 0.2 --fault-rate 0.2 --kill-every 10 \
        --json bench/results/soak.json

Sends N distinct signed events to the real intake endpoint (config.serve), a share of them delivered
again (some copies at the same moment), approves every enquiry that reaches review, injects
sandbox faults of every mode at random into about ``fault-rate`` of the destination's calls,
SIGKILLs the django-q2 cluster every ``kill-every`` seconds and restarts it, restarts PostgreSQL
once mid-run, then stops the faults and kills, waits for quiescence and counts, from the
database and the sandbox's own stats:

- every accepted event has exactly one enquiry (``lost`` counts those without);
- every approved enquiry has exactly one destination record, or sits in the console's queue
  with an owner (``unresolved_visible``); one with neither is ``lost``;
- no destination reference has two records (``duplicate_records``);
- no operation is stuck invisibly: due, in flight or reconciling with nobody working on it and
  no person asked (``unresolved_invisible``).

``--destination bottlecrm``: the CRM is a real BottleCRM (started for the run by
``harness/bottlecrm.py``) behind the fault proxy (``harness/faultproxy``): the CRM row is of kind
``bottlecrm`` and points at the proxy, the CRM's faults are the proxy's (``CRM_PROXY_MODES``),
and cases are counted AT BottleCRM through the kind's own look-up by reference, plus every case
in BottleCRM's org (``cases_without_soak_reference``: a case Handover made without its
reference would be invisible to every look-up). Notifications stay on the sandbox.

``--appointments caldav``: before approving each enquiry the reviewer asks for appointment
slots (``ledger.services.request_slots``), read by the workers from a real Radicale
(``harness/radicale.py``) behind a second fault proxy, which arms read faults at about
``fault-rate`` of the calendar's requests. Counted: every read confirmed, or failed and owned
in the queue (``appointment_reads``); none stuck out of sight; the calendar holds exactly the
events it was seeded with (reads never write).

``--documents webdav``: every event attaches a PDF form put on a real WebDAV server (WsgiDAV,
``harness/webdav``) behind the fault proxy, whose reads meet the proxy's faults too; the
documents integration is of kind ``webdav``. Counted from the database against the forms the
share holds (bench/soak_count.py): each document read with exactly its form's fields, or
failed in the queue with an owner; a document with other fields is ``documents_lost``, one with
neither is ``documents_invisible``.

``--relay-down SECONDS``: notifications speak e-mail (kind ``smtp``) to the harness's own
relay (``harness/mailserver``), which refuses every connection from the start, while the
enquiries arrive, until SECONDS after the last was sent, then comes back
(bench/soak_relay.py); the reviewer approves only once the acknowledgements due have gone out.
Counted: acknowledgements proposed, confirmed and at the relay; the relay's duplicates by
Message-ID; people involved (journal rows by a person on the run's e-mail operations).
E-mail's retry window is shrunk to the drill's scale (``EMAIL_RETRY_FIRST_SECONDS=1``, at
most 2 s).

Isolation: by default the soak runs its OWN PostgreSQL (pgserver, a throwaway data directory
under var/soak/), so restarting it never touches anybody else's connections; with
``--database-url`` it uses that server (a fresh ``handover_soak_<pid>`` database) and restarts
it with ``pg_ctlcluster`` (reported as 0 restarts, with the reason, when that is impossible).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.soak_chaos import Chaos
from bench.soak_common import ROOT, SOURCE, close_thread_connection, db_retry, log
from bench.soak_count import Accounting
from bench.soak_postgres import ExternalPostgres, OwnPostgres
from bench.soak_relay import Relay
from bench.soak_traffic import Traffic

REAL_CRM_TIMEOUT_SECONDS = 10.0


class Soak(Traffic, Chaos, Accounting, Relay):
    """One run: its state, set-up and tear-down; the senders and reviewer (soak_traffic.py), the
    faults and kills (soak_chaos.py) and the count (soak_count.py) work on it."""

    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.stop_sending = threading.Event()
        self.stop_chaos = threading.Event()
        self.all_sent = threading.Event()
        self.lock = threading.Lock()
        self.events_sent = 0
        self.accepted: dict[str, str] = {}  # event id -> reference answered
        self.refused: list[str] = []
        self.worker_kills = 0
        self.db_restarts = 0
        self.db_restart_note = ""
        self.cluster_deaths = 0
        self.approved = 0
        self.faults_armed: dict[str, int] = {}
        self.fault_loop_turns = 0
        self.fault_errors: list[str] = []
        self.bottlecrm = None
        self.crm = None  # harness.drill.realcrm.ProxiedCrm when the CRM is real
        self.calendar = None  # harness.drill.calendar.DrillCalendar with --appointments caldav
        self.calendar_events = 0
        self.slots_asked = 0
        self.documents = None  # harness.drill.documents.DocumentStore with --documents webdav
        self.expected_documents: dict[str, dict] = {}  # document id -> the form's fields

    # -- set-up --------------------------------------------------------------------------------

    def setup(self):
        args = self.args
        self.dir = ROOT / "var" / "soak" / f"{time.strftime('%Y%m%d%H%M%S')}-{os.getpid()}"
        self.dir.mkdir(parents=True, exist_ok=True)
        if args.database_url:
            self.pg = ExternalPostgres(args.database_url)
        else:
            self.pg = OwnPostgres(self.dir)
        db_name = f"handover_soak_{os.getpid()}"
        url = self.pg.url(db_name)
        os.environ["DATABASE_URL"] = url
        os.environ.setdefault("SECRET_KEY", "soak-" + secrets.token_urlsafe(40))
        real_crm = args.destination == "bottlecrm"
        os.environ.update(
            {
                "CONNECTOR_TIMEOUT_SECONDS": "1",
                # Above the real CRM's timeout (config/checks.py's order, per integration).
                "Q_TIMEOUT": "30" if real_crm else "8",
                "Q_RETRY": "40" if real_crm else "10",
                "Q_POLL": "0.05",
                "CONN_MAX_AGE": "60",
                "LOG_LEVEL": "WARNING",
            }
        )
        os.environ.pop("HANDOVER_FAILPOINTS", None)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        import django

        django.setup()
        from django.core.management import call_command

        log(f"database {db_name}: migrating")
        call_command("migrate", interactive=False, verbosity=0)

        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group

        from harness.drill.processes import Cluster, WebServer, child_environment, new_secret
        from harness.sandbox_process import SandboxProcess
        from ledger.integrations import ensure_integrations
        from ledger.models import Integration
        from recovery.models import ResponsePolicy

        User = get_user_model()
        self.reviewer = User.objects.create_user("soak-reviewer")
        self.reviewer.groups.add(Group.objects.get(name="reviewer"))
        self.reviewer = User.objects.get(pk=self.reviewer.pk)
        self.owner = User.objects.create_user("soak-owner")
        self.owner.groups.add(Group.objects.get(name="coordinator"))
        # Every queue has an owner: the default response policy names one.
        ResponsePolicy.objects.update_or_create(
            queue="", integration=None, defaults={"owner": self.owner}
        )

        self.sandbox = SandboxProcess()
        self.sandbox.start(self.dir / "sandbox.sqlite3")
        ensure_integrations()
        Integration.objects.update(
            base_url=self.sandbox.url,
            timeout_seconds=1.0,
            retry_budget=3,
            backoff_seconds=0.2,
            settle_delay_seconds=0.2,
            supports_lookup=True,
            supports_idempotency_key=True,
            owner=self.owner,
        )
        if real_crm:
            self.setup_bottlecrm()
        if args.appointments == "caldav":
            self.setup_calendar()
        if args.documents == "webdav":
            self.setup_documents()
        if args.relay_down:
            self.setup_relay()
        self.secret = new_secret()
        self.env = child_environment(INTAKE_SECRETS=json.dumps({SOURCE: [self.secret]}))
        self.web = WebServer(self.dir / "web.log", self.env, workers=2, threads=4).start()
        self.cluster_class = Cluster
        self.cluster = Cluster(self.dir / "cluster.log", self.env, workers=args.workers).start()
        self.web.wait_ready()
        log(f"web {self.web.url}, sandbox {self.sandbox.url}, logs {self.dir}")

    def setup_bottlecrm(self):
        """A BottleCRM for the run, the fault proxy in front, the CRM row pointing at it."""
        from harness.drill.destination import SandboxDestination
        from harness.drill.realcrm import ProxiedCrm, start_bottlecrm
        from ledger.models import Integration, kind_of

        log("starting BottleCRM (harness/bottlecrm.py)")
        self.bottlecrm = start_bottlecrm(progress=log)
        self.crm = ProxiedCrm(
            kind="bottlecrm",
            upstream=self.bottlecrm.url,
            token=self.bottlecrm.token,
            others=SandboxDestination(self.sandbox),
            log_path=self.dir / "proxy.log",
            started_by_drill=True,
        )
        Integration.objects.filter(name=Integration.CRM).update(
            kind="bottlecrm",
            base_url=self.crm.url,
            token=self.bottlecrm.token,
            timeout_seconds=REAL_CRM_TIMEOUT_SECONDS,
        )
        row = Integration.objects.get(name=Integration.CRM)
        problems = kind_of(row).check(row)
        if problems:
            raise RuntimeError("BottleCRM is not ready: " + " ".join(problems))
        log(f"BottleCRM {self.bottlecrm.url} behind the fault proxy {self.crm.url}")

    def setup_calendar(self):
        """A Radicale for the run, seeded with busy time, behind the fault proxy; the
        appointments row (kind caldav) points at the proxy."""
        from harness.drill.calendar import DrillCalendar
        from ledger.models import Integration

        self.calendar = DrillCalendar(self.dir)
        self.calendar.start()
        self.calendar.point(
            {"timeout_seconds": 1.0, "retry_budget": 3, "backoff_seconds": 0.2, "paused": False}
        )
        Integration.objects.filter(name=Integration.APPOINTMENTS).update(owner=self.owner)
        self.calendar_events = self.calendar.records()
        log(f"Radicale {self.calendar.server.url} behind the fault proxy {self.calendar.proxy.url}")

    def setup_documents(self):
        """WsgiDAV behind the fault proxy, the documents row (kind webdav) pointing at it."""
        from harness.drill.documents import DocumentStore
        from ledger.models import Integration

        self.documents = DocumentStore(self.dir / "documents").start()
        Integration.objects.filter(name=Integration.DOCUMENTS).update(
            kind="webdav", base_url=self.documents.url, token=self.documents.token
        )
        log(f"WsgiDAV {self.documents.dav.url} behind the fault proxy {self.documents.url}")

    def teardown(self):
        for child in (getattr(self, "cluster", None), getattr(self, "web", None)):
            if child is not None:
                child.stop()
        if self.calendar is not None:
            self.calendar.close()
        if self.crm is not None:
            self.crm.proxy.stop()
        if self.bottlecrm is not None:
            self.bottlecrm.stop()
        if self.documents is not None:
            self.documents.close()
        if self.relay is not None:
            self.relay.stop()
        if getattr(self, "sandbox", None) is not None:
            self.sandbox.stop()
        if getattr(self, "pg", None) is not None:
            from django.db import connections

            connections.close_all()
            self.pg.stop()

    def run(self) -> dict:
        started = time.monotonic()
        try:
            # Inside the try: a setup that fails half-way still stops what it started.
            self.setup()
            threads = [
                threading.Thread(target=self.approve_loop, name="approver"),
                threading.Thread(target=self.fault_loop, name="faults"),
                threading.Thread(target=self.kill_loop, name="killer"),
            ]
            if self.relay is not None:
                down = threading.Thread(
                    target=self.relay_loop, args=(time.monotonic(),), name="relay"
                )
                threads.append(down)
            for thread in threads:
                thread.start()
            sender = threading.Thread(target=self.send_all, name="senders")
            sender.start()
            # PostgreSQL restarts once, when about 40% of the events are in.
            while sender.is_alive() and len(self.accepted) < 0.4 * self.args.events:
                time.sleep(0.1)
            self.restart_database()
            sender.join()
            self.all_sent.set()
            log(f"sent {self.events_sent} deliveries of {self.args.events} events")
            # The chaos goes on until every enquiry has been approved (so the CRM writes meet
            # it too), and for one more kill after that.
            deadline = time.monotonic() + self.args.quiescence_timeout + self.args.relay_down
            while time.monotonic() < deadline and not self.quiet_for_approval():
                time.sleep(0.5)
            time.sleep(max(self.args.kill_every * 1.5, 3))
            self.stop_chaos.set()
            for thread in threads[1:]:
                thread.join()
            log("faults and kills stopped; waiting for quiescence")
            quiet = self.wait_for_quiescence(self.args.quiescence_timeout)
            threads[0].join(timeout=self.args.quiescence_timeout)
            log("quiescent" if quiet else "NOT quiescent within the bound")
            close_thread_connection()
            figures = db_retry(lambda: self.count(time.monotonic() - started, quiet))
            if self.relay is not None:
                figures.update(db_retry(self.count_relay))
            return figures
        finally:
            self.stop_sending.set()
            self.stop_chaos.set()
            self.teardown()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--duplicate-rate", type=float, default=0.2)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--kill-every", type=float, default=10.0, help="seconds; 0: never")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quiescence-timeout", type=float, default=300.0)
    parser.add_argument(
        "--destination",
        choices=("sandbox", "bottlecrm"),
        default="sandbox",
        help="the CRM: the sandbox, or a real BottleCRM behind the fault proxy",
    )
    parser.add_argument(
        "--appointments",
        choices=("none", "caldav"),
        default="none",
        help="caldav: the reviewer asks for appointment slots before each approval, read from a "
        "real Radicale behind the fault proxy (faults and kills meet the reads too)",
    )
    parser.add_argument(
        "--documents",
        choices=("none", "webdav"),
        default="none",
        help="attach a PDF form to every event, read from a real WsgiDAV behind the fault proxy",
    )
    parser.add_argument(
        "--relay-down",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="notifications by e-mail to the harness's relay, which refuses connections from the "
        "start (while the enquiries arrive) until this long after the last was sent",
    )
    parser.add_argument(
        "--database-url",
        default="",
        help="use this PostgreSQL server (restarted with pg_ctlcluster) instead of an own one",
    )
    args = parser.parse_args(argv)
    figures = Soak(args).run()
    text = json.dumps(figures, indent=2)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    summary = {k: v for k, v in figures.items() if k != "details"}
    print(json.dumps(summary))
    ok = (
        figures["lost"] == 0
        and figures["duplicate_records"] == 0
        and figures["unresolved_invisible"] == 0
        and figures.get("documents_lost", 0) == 0
        and figures.get("documents_invisible", 0) == 0
        and figures.get("relay_duplicates", 0) == 0
        and figures.get("people_involved", 0) == 0
        and figures.get("acknowledgements_confirmed") == figures.get("acknowledgements")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
