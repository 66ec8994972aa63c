"""Fixtures for the console's tests.

- ``demo``: the demo seed (users per role, policies, every queue and state, TEST-001).
- ``people``: one user per role (coordinator, reviewer, admin) plus ``None`` for anonymous.
- ``client_for(role)``: a logged-in test client.
- ``story``: small builders for enquiries and operations in a given state (real transitions).
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import Client

from tests.intake.factories import drive

# The ledger's fixtures, reused by the browser tests: a real sandbox process, integration rows
# pointing at it, enquiries approved through the services, real qcluster processes.
from tests.ledger.conftest import (  # noqa: F401
    approved_enquiry,
    email_integration,
    integrations,
    mail,
    mail_server,
    make_enquiry,
    reviewer,
    run_queue,
    sandbox,
    sandbox_process,
    start_cluster,
)
from tests.ledger.factories import make_operation

# Chromium, and a page that fails on any CSP violation: tests/recovery/browser.py.
from tests.recovery.browser import chromium, page  # noqa: F401

SYSTEM = "system:tests"


@pytest.fixture
def demo(db, monkeypatch):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-for-console-tests")
    call_command("seed_demo", stdout=io.StringIO())
    from django.contrib.auth import get_user_model

    return {u.username: u for u in get_user_model().objects.all()}


@pytest.fixture
def people(make_user):
    return {
        role: make_user(role, username=f"the-{role}")
        for role in ("coordinator", "reviewer", "admin")
    }


@pytest.fixture
def client_for(people):
    def make(role):
        client = Client()
        if role is not None:
            client.force_login(people[role])
        return client

    return make


@pytest.fixture
def integrations_rows(db):
    from ledger.integrations import ensure_integrations

    return ensure_integrations()


@pytest.fixture
def story(db, make_user, integrations_rows):
    """story.enquiry(state, **fields) and story.operation(state, enquiry=None, action=...)."""
    from intake.models import Category, Enquiry, Revision
    from ledger.models import Attempt, Operation

    approver = make_user("reviewer", username="story-reviewer")
    category, _ = Category.objects.get_or_create(slug="waste", defaults={"name": "Bins and waste"})

    class Story:
        reviewer = approver

        def enquiry(self, state="ready_for_review", *, category=category, **fields):
            fields.setdefault("message", "My bin was not collected on Tuesday.")
            fields.setdefault("email", "resident@example.org")
            enquiry = Enquiry.objects.create(source="website", category=category, **fields)
            Revision.objects.create(
                enquiry=enquiry,
                number=1,
                category=category,
                fields={"message": enquiry.message, "email": enquiry.email},
            )
            return drive(enquiry, state, person=approver)

        def operation(
            self,
            state="unknown",
            *,
            enquiry=None,
            action="crm.create_enquiry",
            integration="crm",
            attention="",
            attempts=(),
        ):
            if enquiry is None:
                enquiry = self.enquiry(
                    {"unknown": "submission_unknown", "confirmed": "confirmed"}.get(
                        state, "approved"
                    )
                )
            op = make_operation(
                enquiry,
                state,
                action=action,
                integration=integrations_rows[integration] if integration else None,
            )
            for number, outcome in enumerate(attempts, start=1):
                Attempt.objects.create(operation=op, number=number, worker="tests", outcome=outcome)
            if attention:
                Operation.objects.filter(pk=op.pk).update(attention=attention)
                op.refresh_from_db()
            return op

    return Story()
