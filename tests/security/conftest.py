import io
import os
import signal
import subprocess

import pytest
import requests
from django.core.management import call_command

from harness.processes import free_port, web_command
from tests.conftest import wait_for_condition
from tests.intake.factories import drive
from tests.ledger.conftest import PROJECT_ROOT, child_database_url
from tests.ledger.factories import make_operation

DEMO_PASSWORD = "demo-pass-for-security-tests"


def _enquiry_in(state, *, admin):
    """An enquiry walked to ``state`` through its transitions (so the journal is real)."""
    from intake.models import Enquiry, Revision

    enquiry = Enquiry.objects.create(
        source="website",
        name="Walker Fixture",
        email="walker.fixture@example.com",
        message=f"An enquiry left in {state} for the URL walkers.",
    )
    Revision.objects.create(enquiry=enquiry, number=1, fields={"message": enquiry.message})
    drive(enquiry, state, person=admin)
    return enquiry


def _operation_in(state, enquiry, action, *, integration):
    from ledger.models import Attempt

    op = make_operation(
        enquiry,
        state,
        action=action,
        integration=integration,
        payload={"reference": enquiry.reference, "message": enquiry.message},
    )
    if state in ("failed", "unknown", "confirmed"):
        Attempt.objects.create(
            operation=op,
            number=1,
            worker="security-tests",
            outcome={"failed": "transient", "unknown": "uncertain"}.get(state, "success"),
        )
    return op


@pytest.fixture
def world(db, monkeypatch):
    """The demo seed, plus an enquiry in every state and an operation in every state.

    Returns the demo admin (a superuser): GETs made as them reach every view.
    """
    from django.contrib.auth import get_user_model

    from intake import answers
    from ledger.models import Integration

    monkeypatch.setenv("DEMO_PASSWORD", DEMO_PASSWORD)
    call_command("seed_demo", stdout=io.StringIO())
    admin = get_user_model().objects.get(username="admin")
    crm = Integration.objects.get(name="crm")
    notify = Integration.objects.get(name="notify")
    enquiries = {
        state: _enquiry_in(state, admin=admin)
        for state in [
            "received",
            "validated",
            "ready_for_review",
            "needs_information",
            "rejected",
            "approved",
            "submitted",
            "submission_unknown",
            "confirmed",
        ]
    }
    for state, enquiry_state, action, integration in [
        ("proposed", "ready_for_review", "crm.create_enquiry", crm),
        ("cancelled", "rejected", "crm.create_enquiry", crm),
        ("approved", "approved", "crm.create_enquiry", crm),
        ("failed", "approved", "notify.send", notify),
        ("submitted", "submitted", "crm.create_enquiry", crm),
        ("unknown", "submission_unknown", "crm.create_enquiry", crm),
        ("confirmed", "confirmed", "crm.create_enquiry", crm),
    ]:
        _operation_in(state, enquiries[enquiry_state], action, integration=integration)
    # A resident's reply nobody could match, with a document: the queue links its page.
    answers.receive_answer(
        None, channel="email", text="a reply", uploads=[answers.Upload("a.pdf", b"%PDF-1.4")]
    )
    return admin


def snapshot():
    """What a GET must never change: the journal, every state, every queued task."""
    from django_q.models import OrmQ

    from intake.models import Enquiry, Revision
    from ledger.models import Attempt, Integration, JournalEntry, Operation

    return {
        "journal": JournalEntry.objects.count(),
        "enquiries": list(
            Enquiry.objects.order_by("pk").values_list(
                "pk", "state", "current_revision", "approved_revision", "owner_id", "redacted_at"
            )
        ),
        "revisions": Revision.objects.count(),
        "operations": list(
            Operation.objects.order_by("pk").values_list(
                "pk", "state", "attempt_count", "owner_id", "task_enqueued_at", "external_id"
            )
        ),
        "attempts": Attempt.objects.count(),
        "integrations": list(
            Integration.objects.order_by("pk").values_list(
                "name", "paused", "awaiting_backlog_review"
            )
        ),
        "queued_tasks": OrmQ.objects.count(),
    }


@pytest.fixture
def start_web(tmp_path):
    """start_web(*options, **env) -> (port, url): the web server as runall starts it (with
    more command-line options, if given), on this test's database, stopped at the end of the
    test."""
    started = []

    def start(*options, **extra):
        port = free_port()
        env = {
            **os.environ,
            "DATABASE_URL": child_database_url(),
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
        log_path = tmp_path / f"web-{port}.log"
        log = log_path.open("w")
        proc = subprocess.Popen(
            web_command(f"127.0.0.1:{port}", "--access-log", *options),
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append((proc, log))
        url = f"http://127.0.0.1:{port}"

        def ready():
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                return requests.get(url + "/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for_condition(ready, timeout=120, interval=0.2, message="the web server to answer")
        return port, url

    yield start
    for proc, log in started:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
