"""Fixtures for the ledger's tests, written to be lifted by the drill and soak tests.

- ``sandbox``: the sandbox as a real process (one per test module, reset before each test).
- ``integrations``: the four Integration rows pointing at that sandbox, fast settings.
- ``make_enquiry`` / ``approved_enquiry``: enquiries in ready_for_review / approved (with the
  CRM operation approved and its task queued), made through the real transitions and services.
- ``run_queue``: an in-process worker for unit tests: runs due django-q2 tasks from the ORM
  queue until a condition holds (no cluster needed).
- ``start_cluster``: real ``manage.py qcluster`` processes on the test database.
- ``wait_for`` (from tests/conftest.py): poll with a bound and a clear failure message.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import transaction

from harness.processes import Child, qcluster_command
from harness.sandbox_process import SandboxProcess
from tests.conftest import wait_for_condition

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_START_TIMEOUT = 60.0


# --- the sandbox --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox_process(tmp_path_factory):
    with SandboxProcess() as process:
        process.start(tmp_path_factory.mktemp("sandbox") / "sandbox.sqlite3")
        yield process


@pytest.fixture
def sandbox(sandbox_process):
    """A running sandbox with no records, no faults and default capabilities."""
    if not sandbox_process.running:
        sandbox_process.restart()
    sandbox_process.reset()
    yield sandbox_process
    if sandbox_process.running:
        sandbox_process.clear_faults()


def crm_records(sandbox, reference=None) -> int:
    stats = sandbox.stats()["crm"]
    if reference is None:
        return stats["total"]
    return stats["by_reference"].get(reference, 0)


# --- integrations and enquiries -----------------------------------------------------------------


@pytest.fixture
def integrations(db, sandbox):
    """Integration rows for the sandbox: 1s timeout, 3 attempts, 0.05s first backoff."""
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration

    rows = ensure_integrations()
    Integration.objects.update(
        base_url=sandbox.url,
        token="",
        timeout_seconds=1.0,
        retry_budget=3,
        backoff_seconds=0.05,
        supports_lookup=True,
        supports_idempotency_key=True,
        settle_delay_seconds=0.0,
        paused=False,
        awaiting_backlog_review=False,
    )
    for row in rows.values():
        row.refresh_from_db()
    return rows


@pytest.fixture
def reviewer(make_user):
    return make_user("reviewer")


@pytest.fixture
def make_enquiry(db):
    """make_enquiry(**fields) -> an enquiry in ready_for_review with revision 1."""
    from intake.models import Category, Enquiry, Revision

    def make(*, email="resident@example.org", message="My bin was not collected", **extra):
        # Filed under a category, as the CRM requires of an approval (category=None: none).
        if "category" not in extra:
            extra["category"], _ = Category.objects.get_or_create(
                slug="waste", defaults={"name": "Bins and waste"}
            )
        enquiry = Enquiry.objects.create(
            source="website", name="A Resident", email=email, message=message, **extra
        )
        Revision.objects.create(
            enquiry=enquiry,
            number=1,
            category=extra["category"],
            fields={"name": "A Resident", "email": email, "message": message},
        )
        with transaction.atomic():
            enquiry.validate(actor="system:test", reason="valid")
            enquiry.mark_ready_for_review(actor="system:test", reason="ready")
            enquiry.save()
        return enquiry

    return make


@pytest.fixture
def approved_enquiry(make_enquiry, reviewer, integrations):
    """approved_enquiry() -> (enquiry, CRM operation): approved, its task queued."""
    return approver(make_enquiry, reviewer)


def approver(make_enquiry, reviewer):
    """make(**fields) -> (enquiry, CRM operation): an enquiry approved by ``reviewer``, its task
    queued, against whatever CRM row the calling fixture set up."""
    from ledger.services import approve_revision

    def make(**fields):
        enquiry = make_enquiry(**fields)
        op = approve_revision(enquiry.pk, actor=reviewer, reason="checked")
        enquiry.refresh_from_db()
        return enquiry, op

    return make


# --- an in-process worker for unit tests --------------------------------------------------------


def run_due_tasks() -> int:
    """Run every due task in the ORM queue once, in this process. Returns how many ran."""
    from django.utils import timezone
    from django.utils.module_loading import import_string
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    ran = 0
    for row in list(OrmQ.objects.filter(lock__lte=timezone.now()).order_by("id")):
        OrmQ.objects.filter(pk=row.pk).delete()
        task = SignedPackage.loads(row.payload)
        import_string(task["func"])(*task["args"], **task["kwargs"])
        ran += 1
    return ran


@pytest.fixture
def run_queue():
    """run_queue(until=callable, timeout=10): run due tasks until ``until()`` is truthy (or,
    without ``until``, until the queue has nothing due)."""

    def run(until=None, timeout=10.0):
        def done():
            ran = run_due_tasks()
            return until() if until is not None else ran == 0

        wait_for_condition(
            done, timeout=timeout, interval=0.02, message="queued work to reach the expected state"
        )

    return run


# --- real clusters ------------------------------------------------------------------------------


def child_database_url() -> str:
    """DATABASE_URL for a child process: this test run's own database."""
    from django.db import connection

    from config.db import connection_url

    return connection_url(connection.settings_dict)


class ClusterProcess(Child):
    """``python manage.py qcluster`` on the test database, in its own session (a failpoint
    kills the whole group, as a crash of the machine would): the drill's child process, with
    the whole log by default and a test failure when it does not exit."""

    def __init__(self, log_path: Path, env: dict[str, str], skip_checks=False):
        command = qcluster_command(*(["--skip-checks"] if skip_checks else []))
        super().__init__("cluster", command, env, log_path)

    def log(self, tail: int | None = None) -> str:
        return super().log(tail)

    def wait_exit(self, timeout=60.0) -> int:
        code = super().wait_exit(timeout)
        if code is None:
            self.kill()
            pytest.fail(f"cluster did not exit within {timeout:g}s; log:\n{self.log(3000)}")
        return code


@pytest.fixture
def start_cluster(tmp_path):
    """start_cluster(workers=1, failpoints=(), env={}, skip_checks=False) -> ClusterProcess.

    Settings for tests: connector timeout 1s < Q_TIMEOUT 8s < Q_RETRY 10s, poll 0.05s.
    """
    clusters: list[ClusterProcess] = []

    def start(*, workers=1, failpoints=(), env=None, skip_checks=False, name=None):
        child = dict(os.environ)
        child.update(
            {
                "DATABASE_URL": child_database_url(),
                "Q_WORKERS": str(workers),
                "Q_TIMEOUT": "8",
                "Q_RETRY": "10",
                "Q_POLL": "0.05",
                "CONNECTOR_TIMEOUT_SECONDS": "1",
                "HANDOVER_FAILPOINTS": ",".join(failpoints),
                "CONN_MAX_AGE": "60",
                "PYTHONUNBUFFERED": "1",
                "LOG_LEVEL": "INFO",
            }
        )
        child.update(env or {})
        name = name or f"cluster-{len(clusters) + 1}"
        cluster = ClusterProcess(tmp_path / f"{name}.log", child, skip_checks).start()
        clusters.append(cluster)
        return cluster

    yield start
    for cluster in clusters:
        cluster.stop()


# --- the test SMTP relay (harness.mailserver) ------------------------------------------------


@pytest.fixture(scope="module")
def mail_server(tmp_path_factory):
    from harness.mailserver import MailServer

    with MailServer(tmp_path_factory.mktemp("mail") / "messages") as server:
        yield server


@pytest.fixture
def mail(mail_server):
    """A running SMTP relay with no messages and no faults."""
    mail_server.reset()
    yield mail_server
    mail_server.clear_faults()


@pytest.fixture
def email_integration(integrations, mail, make_user, settings):
    """The notification integration speaking e-mail to the test relay (kind smtp), owned by an
    admin: 1 s timeout; e-mail's retry window (24 hours) with its waits shrunk to 0.05 s first,
    at most 0.2 s (a test that needs the real schedule sets it, and moves the clock)."""
    from ledger.kinds import SMTP

    settings.EMAIL_RETRY_FIRST_SECONDS = 0.05
    settings.EMAIL_RETRY_MAX_SECONDS = 0.2
    settings.EMAIL_RETRY_HOURS = 24.0
    from ledger.models import Integration

    owner = make_user("admin", username="mail-owner", email="owner@example.org")
    Integration.objects.filter(name=Integration.NOTIFY).update(
        kind=SMTP,
        base_url=mail.url,
        token="",
        owner=owner,
        supports_lookup=False,
        supports_idempotency_key=False,
    )
    row = Integration.objects.get(name=Integration.NOTIFY)
    row.full_clean()
    return row


# --- a real CalDAV server (harness/radicale.py) for the appointments integration ----------------
# The calendar's two requests, as the fault proxy names them (docs/sandbox.md).
CALDAV_TARGETS = {
    "appointments.version": "PROPFIND /handover/visits/",
    "appointments.events": "REPORT /handover/visits/",
}


@pytest.fixture(scope="module")
def radicale_process():
    from harness.radicale import Radicale

    with Radicale() as server:
        yield server


@pytest.fixture
def radicale(radicale_process):
    """A running Radicale whose calendar holds no events."""
    radicale_process.clear()
    return radicale_process


@pytest.fixture(scope="module")
def calendar_proxy_process(radicale_process, tmp_path_factory):
    from harness.faultproxy import FaultProxy

    log = tmp_path_factory.mktemp("calendar-proxy") / "proxy.log"
    with FaultProxy(radicale_process.url, targets=CALDAV_TARGETS, log_path=log) as proxy:
        yield proxy


@pytest.fixture
def calendar_proxy(calendar_proxy_process, radicale):
    """The fault proxy in front of ``radicale``, no faults pending, counters at zero."""
    calendar_proxy_process.reset()
    yield calendar_proxy_process
    calendar_proxy_process.clear_faults()
    calendar_proxy_process.release()


@pytest.fixture
def point_appointments(db):
    """point_appointments(server, via=None, **row) -> the appointments row, kind caldav, at
    ``server``'s calendar (or the same path through ``via``, a FaultProxy)."""
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration

    def point(server, via=None, **row):
        ensure_integrations()
        url = server.calendar_url
        if via is not None:
            url = url.replace(server.url, via.url)
        values = {
            "kind": "caldav",
            "base_url": url,
            "token": server.credentials,
            "timeout_seconds": 2.0,
            "retry_budget": 3,
            "backoff_seconds": 0.05,
            "max_age_seconds": 300.0,
            "paused": False,
            **row,
        }
        Integration.objects.filter(name="appointments").update(**values)
        return Integration.objects.get(name="appointments")

    return point


@pytest.fixture
def visit_enquiry(make_enquiry):
    """visit_enquiry() -> an enquiry ready for review whose category needs a visit."""
    from intake.models import Revision
    from tests.intake.factories import CategoryFactory

    category = CategoryFactory(slug="home-visit", name="Home visit", books_appointments=True)

    def make(**fields):
        enquiry = make_enquiry(**fields)
        Revision.objects.filter(enquiry=enquiry).update(category=category)
        return enquiry

    return make
