"""The drill's runner: sets up the real parts, runs every case, restores what it changed.

What it starts itself: a sandbox (a fresh data file under ``var/drill/<run>/``), the web
server (config.serve) on a free port (so every event goes through the real intake endpoint over
HTTP), and a django-q2 cluster (which the crash case kills and restarts with
``HANDOVER_FAILPOINTS`` set in that cluster's environment only).

Where the writes go:
- **Sandbox mode** (the CRM is the sandbox, or ``--destination sandbox``): the CRM, the
  notifications and the documents point at the drill's sandbox, which also injects the faults.
- **Appointments**, in every mode: a real CalDAV server (Radicale) the drill starts, behind the
  fault proxy (calendar.py), kind ``caldav``; its cases count events at the server.
- **A real CRM** (the configured CRM row when it is not the sandbox, e.g. kind ``bottlecrm``,
  or ``--destination bottlecrm``, which starts a BottleCRM for the run): the CRM row points at a
  fault proxy in front of that CRM, the other three integrations at the drill's sandbox, and
  records are counted at the CRM through its kind's own look-up (realcrm.py).

What it changes in the configured database, and gives back:
- Enquiries of source ``drill``; each case's event ID is ``DRILL-<run>-<case>`` (the input
  reference), so drill enquiries are easy to find and never mistaken for residents'.
- Users ``drill`` (approves) and ``drill-editor`` (edits: no self-approval), reviewers.
- The four Integration rows, pointed as above with short settings for the run. Their previous
  values are written to a file first (``var/drill/integrations-<database hash>.json``) and
  restored at the end (also on Ctrl-C or SIGTERM); a run that was killed outright leaves that
  file behind, and the next run on that database restores it before doing anything else.
- If fewer than two categories are active, two ``drill-*`` categories are made and retired
  again at the end.
"""

from __future__ import annotations

import json
import logging
import signal
import time
import uuid

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from harness.drill.backup import DRILL_DIR, backup_path, restore_integrations, row_values
from harness.drill.calendar import DrillCalendar
from harness.drill.destination import (
    CannotRun,
    Destination,
    SandboxDestination,
    is_sandbox,
)
from harness.drill.documents import DocumentStore
from harness.drill.processes import (
    Cluster,
    DrillError,
    WebServer,
    child_environment,
    new_secret,
)
from harness.drill.realcrm import ProxiedCrm, start_bottlecrm
from harness.drill.results import CaseFailed, CaseResult
from harness.processes import wait_until
from harness.sandbox_process import SandboxProcess
from intake.models import Category, Enquiry, IntakeEvent
from intake.signing import sign
from ledger.integrations import ensure_integrations
from ledger.kinds import HANDOVER, WEBDAV
from ledger.models import Action, Integration, Operation, OperationState, kind_of

logger = logging.getLogger("harness.drill")

SOURCE = "drill"
ACTOR = "system:drill"
# The drill's integration settings: short enough that the whole matrix runs in about a minute.
DRILL_SETTINGS = {
    # The sandbox speaks Handover's own contract, whatever the rows spoke before the drill.
    "kind": "handover",
    "token": "",
    "timeout_seconds": 1.0,
    "retry_budget": 2,
    "backoff_seconds": 0.2,
    "supports_lookup": True,
    "supports_idempotency_key": True,
    "settle_delay_seconds": 0.2,
    "paused": False,
    "awaiting_backlog_review": False,
}
# Against a real CRM: its own kind, address and token are kept; a timeout generous enough for
# a CRM on a busy machine (the proxy's faults never depend on it), and a cluster timeout above it.
REAL_CRM_SETTINGS = {
    "timeout_seconds": 10.0,
    "retry_budget": 2,
    "backoff_seconds": 0.2,
    "supports_lookup": True,
    "supports_idempotency_key": True,  # the kind's declaration still caps it
    "settle_delay_seconds": 0.2,  # the kind's own minimum still applies
    "paused": False,
    "awaiting_backlog_review": False,
}
CHECK_TIMEOUT_SECONDS = 30.0
REAL_CRM_CLUSTER = {"Q_TIMEOUT": "30", "Q_RETRY": "40"}
WAIT_SECONDS = 30.0
REAL_CRM_WAIT_SECONDS = 90.0
DESTINATIONS = ("sandbox", "bottlecrm")


class Drill:
    """Everything a case needs: the endpoint, the destination, the workers, the actors."""

    def __init__(self, *, out=None, force_sandbox=False, run_id=None, destination=None):
        """``destination``: None for the configured CRM, or one of DESTINATIONS."""
        if destination is not None and destination not in DESTINATIONS:
            raise ValueError(f"unknown destination {destination!r}; one of {DESTINATIONS}")
        self.out = out
        self.choice = "sandbox" if force_sandbox else destination
        self.run_id = run_id or timezone.now().strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:4]
        self.dir = DRILL_DIR / self.run_id
        self.secret = new_secret()
        # Signs the drill's Mailgun inbound posts (the web server checks it).
        self.mailgun_key = new_secret()
        self.sandbox: SandboxProcess | None = None
        self.bottlecrm = None
        self.calendar: DrillCalendar | None = None
        self.documents: DocumentStore | None = None
        self.destination: Destination | None = None
        self.web: WebServer | None = None
        self.cluster: Cluster | None = None
        self.clusters_started = 0
        self.session = requests.Session()
        self.session.trust_env = False
        self.made_categories: list[Category] = []
        self.sandbox_mode = False
        self.rows_changed = False
        self.wait_seconds = WAIT_SECONDS
        self.env: dict[str, str] = {}

    # --- set-up and tear-down -----------------------------------------------------------------

    def say(self, text: str):
        if self.out is not None:
            self.out.write(text)

    def setup(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        if restore_integrations():
            self.say("A previous drill did not finish: its integration settings were restored.")
        rows = ensure_integrations()
        crm = rows[Integration.CRM]
        configured = crm.base_url
        self.sandbox_mode = self.choice == "sandbox" or (
            self.choice is None
            and crm.kind == HANDOVER
            and (
                configured.rstrip("/") == settings.SANDBOX_URL.rstrip("/") or is_sandbox(configured)
            )
        )
        # Written before anything changes, so whatever happens next the rows come back.
        backup_path().write_text(
            json.dumps({name: row_values(row) for name, row in rows.items()}, indent=1)
        )
        self.rows_changed = True
        self.sandbox = SandboxProcess()
        self.sandbox.start(self.dir / "sandbox.sqlite3")
        sandbox = SandboxDestination(self.sandbox)
        if self.sandbox_mode:
            self.destination = sandbox
            Integration.objects.update(base_url=self.sandbox.url, **DRILL_SETTINGS)
        else:
            self._setup_real_crm(crm, sandbox)
        # Appointments: a real CalDAV server (Radicale) through the fault proxy, in every mode.
        self.calendar = DrillCalendar(self.dir)
        self.calendar.start()
        self.calendar.point(DRILL_SETTINGS)
        # Documents: a real WebDAV server behind the fault proxy, whatever the CRM is.
        self.documents = DocumentStore(self.dir / "documents").start()
        Integration.objects.filter(name=Integration.DOCUMENTS).update(
            **{
                **DRILL_SETTINGS,
                "kind": WEBDAV,
                "base_url": self.documents.url,
                "token": self.documents.token,
            }
        )
        self.reviewer, self.editor = self._users()
        self.categories = self._categories()
        self.env = child_environment(
            INTAKE_SECRETS=json.dumps({**settings.INTAKE_SECRETS, SOURCE: [self.secret]}),
            MAILGUN_WEBHOOK_SIGNING_KEY=self.mailgun_key,
            **({} if self.sandbox_mode else REAL_CRM_CLUSTER),
        )
        self.web = WebServer(self.dir / "web.log", self.env).start()
        self.start_cluster()
        self.web.wait_ready()

    def _setup_real_crm(self, crm, sandbox: SandboxDestination):
        """The CRM row through a fault proxy in front of the real CRM; the rest on the sandbox."""
        if self.choice == "bottlecrm":
            self.say("Starting a BottleCRM for this run (minutes on a machine's first run)")
            try:
                self.bottlecrm = start_bottlecrm(progress=self.say)
            except Exception as exc:  # the harness's own errors name the step and its log
                raise DrillError(f"BottleCRM did not start: {exc}") from exc
            kind, upstream, token = "bottlecrm", self.bottlecrm.url, self.bottlecrm.token
        else:
            kind, upstream, token = crm.kind, crm.base_url, crm.token
        # Checked as check_integration would, straight at the CRM (never through the proxy),
        # with patience for a CRM on a busy machine; nothing is started for a CRM that fails.
        checked = Integration.objects.get(name=Integration.CRM)
        checked.kind, checked.base_url, checked.token = kind, upstream, token
        checked.timeout_seconds = CHECK_TIMEOUT_SECONDS
        problems = kind_of(checked).check(checked)
        if problems:
            raise DrillError(
                f"the CRM is not ready for the drill ({upstream}, kind {kind}): "
                + " ".join(problems)
            )
        try:
            self.destination = ProxiedCrm(
                kind=kind,
                upstream=upstream,
                token=token,
                others=sandbox,
                log_path=self.dir / "proxy.log",
                started_by_drill=self.bottlecrm is not None,
            )
        except (ValueError, RuntimeError) as exc:  # no targets for the kind; no proxy
            raise DrillError(
                f"the fault proxy in front of {upstream} did not start: {exc}"
            ) from exc
        self.wait_seconds = REAL_CRM_WAIT_SECONDS
        Integration.objects.exclude(name=Integration.CRM).update(
            base_url=self.sandbox.url, **DRILL_SETTINGS
        )
        Integration.objects.filter(name=Integration.CRM).update(
            kind=kind, base_url=self.destination.url, token=token, **REAL_CRM_SETTINGS
        )

    def teardown(self):
        for child in (self.cluster, self.web):
            if child is not None:
                child.stop()
        if self.rows_changed:
            restore_integrations()
        if self.destination is not None:
            self.destination.close()
        if self.sandbox is not None:
            self.sandbox.stop()
        if self.calendar is not None:
            self.calendar.close()
        if self.documents is not None:
            self.documents.close()
        if self.bottlecrm is not None:
            self.bottlecrm.stop()
        for category in self.made_categories:
            Category.objects.filter(pk=category.pk).update(active=False)
        Category.objects.filter(slug="drill-visit").update(active=False)
        self.session.close()

    def describe_destination(self) -> dict:
        """For the report: which destination, of which kind, behind which proxy."""
        if self.destination is None:
            return {"name": "not started"}
        if hasattr(self.destination, "as_dict"):
            return self.destination.as_dict()
        return {
            "name": "sandbox",
            "kind": HANDOVER,
            "url": self.destination.url,
            "proxy": None,
            "started_by_drill": self.sandbox is not None,
            "counted_by": "the sandbox's own statistics (records per reference)",
        }

    def uses(self, names) -> str:
        """The destination each integration a case touches was, for the case's report row."""
        describe = getattr(self.destination, "describe_integration", None)

        def where(name):
            if name == "notify:smtp":
                return "the drill's SMTP relay (harness.mailserver)"
            if name == Integration.DOCUMENTS and self.documents is not None:
                return self.documents.describe()
            if name == "appointments" and self.calendar is not None:
                return self.calendar.describe()
            return describe(name) if describe else "sandbox"

        return "; ".join(f"{name.split(':')[0]}: {where(name)}" for name in names)

    def _users(self):
        # "drill" approves (reviewer) and resolves its own items afterwards (coordinator);
        # "drill-editor" makes the edits, since nobody may approve a revision they edited.
        User = get_user_model()
        roles = {"drill": ["reviewer", "coordinator"], "drill-editor": ["reviewer"]}
        users = []
        for username, groups in roles.items():
            user, created = User.objects.get_or_create(
                username=username, defaults={"first_name": "Drill", "is_active": True}
            )
            if created:
                user.set_unusable_password()
                user.save()
            user.groups.add(*Group.objects.filter(name__in=groups))
            users.append(User.objects.get(pk=user.pk))  # fresh permission cache
        return users

    def _categories(self):
        active = list(Category.objects.filter(active=True).order_by("slug")[:2])
        for slug in ("drill-a", "drill-b"):
            if len(active) >= 2:
                break
            category, _ = Category.objects.update_or_create(
                slug=slug, defaults={"name": f"Drill {slug[-1].upper()}", "active": True}
            )
            self.made_categories.append(category)
            active.append(category)
        return active

    # --- workers ------------------------------------------------------------------------------

    def start_cluster(self, failpoints=()) -> Cluster:
        self.clusters_started += 1
        name = f"cluster-{self.clusters_started}" + ("-failpoint" if failpoints else "")
        self.cluster = Cluster(self.dir / f"{name}.log", self.env, failpoints=failpoints).start()
        return self.cluster

    def stop_cluster(self):
        if self.cluster is not None:
            self.cluster.stop()

    # --- the intake endpoint ------------------------------------------------------------------

    def event_id(self, key: str) -> str:
        return f"DRILL-{self.run_id}-{key}"

    def payload(self, key: str, **fields) -> dict:
        return {
            "name": "Drill Case",
            "email": "drill@example.org",
            "subject": f"[drill {self.run_id}] {key}",
            "message": f"Drill case {key}: please ignore, this enquiry tests Handover itself.",
            "consent": True,
            **fields,
        }

    def body(self, payload: dict) -> bytes:
        return json.dumps(payload, sort_keys=True).encode()

    def headers(self, event_id: str, body: bytes) -> dict:
        timestamp = int(time.time())
        return {
            "webhook-id": event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(self.secret, event_id, timestamp, body),
            "Content-Type": "application/json",
            # As behind a TLS-terminating proxy: with SECURE=1 plain HTTP would be redirected.
            "X-Forwarded-Proto": "https",
        }

    def post(self, event_id: str, body: bytes, session=None) -> tuple[int, dict]:
        session = session or self.session
        response = session.post(
            f"{self.web.url}/intake/events/{SOURCE}/",
            data=body,
            headers=self.headers(event_id, body),
            timeout=30,
        )
        try:
            answer = response.json()
        except ValueError:
            answer = {"raw": response.text[:200]}
        return response.status_code, answer

    def send(self, case: CaseResult, **fields) -> Enquiry:
        """Deliver the case's event; expect 202 and return the enquiry it made."""
        body = self.body(self.payload(case.key, **fields))
        status, answer = self.post(case.input_reference, body)
        if status != 202:
            raise CaseFailed(f"the intake endpoint answered {status}: {answer}")
        enquiry = Enquiry.objects.get(reference=answer["reference"])
        case.enquiry_reference = enquiry.reference
        case.note(f"intake 202, {enquiry.reference}")
        return enquiry

    def stored_event(self, event_id: str):
        return IntakeEvent.objects.filter(source=SOURCE, event_id=event_id).first()

    # --- waiting and reading ------------------------------------------------------------------

    def wait(self, predicate, what: str, timeout: float | None = None):
        timeout = timeout or self.wait_seconds
        return wait_until(predicate, timeout=timeout, what=what, error=CaseFailed)

    def wait_enquiry(self, enquiry, *states, timeout=None) -> Enquiry:
        def reached():
            enquiry.refresh_from_db()
            return enquiry.state in states and enquiry

        try:
            return self.wait(
                reached, f"enquiry {enquiry.reference} to be {'/'.join(states)}", timeout
            )
        except CaseFailed as exc:
            raise CaseFailed(f"{exc}; it is {enquiry.state}") from None

    def crm_operation(self, enquiry, revision=None) -> Operation | None:
        ops = Operation.objects.filter(enquiry=enquiry, action=Action.CREATE_ENQUIRY)
        if revision is not None:
            ops = ops.filter(revision=revision)
        return ops.order_by("-revision", "-created_at").first()

    def operation(self, enquiry, action) -> Operation | None:
        return (
            Operation.objects.filter(enquiry=enquiry, action=action).order_by("-created_at").first()
        )

    def wait_operation(self, op, predicate, what, timeout=None) -> Operation:
        def reached():
            op.refresh_from_db()
            return predicate(op) and op

        try:
            return self.wait(reached, what, timeout)
        except CaseFailed as exc:
            raise CaseFailed(f"{exc}; it is {op.state} {op.attention}".strip()) from None

    def settle(self, enquiry, timeout=None):
        """Wait until none of the enquiry's work is due or in flight (faults can be re-armed)."""

        def busy():
            return list(
                Operation.objects.filter(
                    enquiry=enquiry, state__in=[OperationState.APPROVED, OperationState.SUBMITTED]
                )
                .exclude(state=OperationState.APPROVED, held=True)
                .values_list("action", "state")
            ) + list(
                Operation.objects.filter(
                    enquiry=enquiry, state=OperationState.UNKNOWN, attention=""
                ).values_list("action", "state")
            )

        self.wait(lambda: not busy(), f"{enquiry.reference}'s work to come to rest", timeout)

    def approve(self, enquiry, actor=None) -> Operation:
        from intake.models import Revision
        from ledger.services import approve_revision

        # The CRM requires a category before an approval (ledger.kinds): a revision the
        # classifier left without one is filed under the drill's first, as a reviewer would.
        Revision.objects.filter(
            enquiry=enquiry, number=enquiry.current_revision, category__isnull=True
        ).update(category=self.categories[0])
        return approve_revision(enquiry.pk, actor=actor or self.reviewer, reason="drill: approve")

    def queue_row(self, kind: str, key) -> str | None:
        """The console queue this item shows in (None: not in the queue)."""
        from recovery.queue import all_rows

        for row in all_rows():
            if row["q_kind"] == kind and str(row["q_key"]) == str(key):
                return row["q_queue"]
        return None

    def records(self, case: CaseResult, enquiry) -> int:
        count = self.destination.records(enquiry.reference)
        case.destination_records = count
        return count

    def require_faults(self):
        if not self.destination.can_inject_faults:
            raise CannotRun(
                f"cannot be run against {self.destination.describe()}: this case injects faults "
                "into (or pauses) the destination, which needs the sandbox or the fault proxy"
            )

    # --- running ------------------------------------------------------------------------------

    def run_case(self, spec) -> CaseResult:
        case = CaseResult(
            key=spec.key,
            name=spec.name,
            expected=spec.expected,
            input_reference=self.event_id(spec.key),
            destination=self.uses(spec.uses),
        )
        started = time.monotonic()
        try:
            if spec.needs_faults:
                self.require_faults()
            spec.run(self, case)
        except CannotRun as exc:
            case.error = f"not run: {exc}"
        except CaseFailed as exc:
            case.error = f"failed: {exc}"
        except Exception as exc:  # a case must report, never take the drill down
            logger.exception("drill case %s crashed", spec.key)
            case.error = f"error: {exc.__class__.__name__}: {exc}"
        finally:
            if self.documents is not None and "documents" in spec.uses:
                try:
                    self.documents.clear()
                except RuntimeError:
                    pass  # a control error of the proxy, or a server that would not restart
            if self.destination.can_inject_faults:
                try:
                    self.destination.clear_faults()
                    self.destination.capabilities(lookup=True, idempotency_key=True)
                except (requests.RequestException, RuntimeError):
                    pass  # the fault proxy's control errors are RuntimeErrors
            if self.calendar is not None and self.calendar.proxy is not None:
                try:
                    self.calendar.proxy.clear_faults()
                    self.calendar.proxy.release()
                except RuntimeError:
                    pass
            if self.cluster is None or not self.cluster.running:
                self.start_cluster()
        case.seconds = time.monotonic() - started
        return case


def install_stop_handlers():
    """SIGTERM ends the drill like Ctrl-C does, so the integration rows are always restored."""

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    return lambda: signal.signal(signal.SIGTERM, previous)
