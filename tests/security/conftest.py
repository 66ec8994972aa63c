import io

import pytest
from django.core.management import call_command
from django.db import transaction

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
    system = "system:security-tests"
    paths = {
        "received": [],
        "validated": ["validate"],
        "ready_for_review": ["validate", "mark_ready_for_review"],
        "needs_information": ["validate", "mark_ready_for_review", "request_information"],
        "rejected": ["validate", "mark_ready_for_review", "reject"],
        "approved": ["validate", "mark_ready_for_review", "approve"],
        "submitted": ["validate", "mark_ready_for_review", "approve", "submit"],
        "submission_unknown": [
            "validate",
            "mark_ready_for_review",
            "approve",
            "submit",
            "mark_submission_unknown",
        ],
        "confirmed": ["validate", "mark_ready_for_review", "approve", "submit", "confirm"],
    }
    people = {"request_information", "reject", "approve"}
    with transaction.atomic():
        for step in paths[state]:
            getattr(enquiry, step)(actor=admin if step in people else system, reason="fixture")
        enquiry.save()
    return enquiry


def _operation_in(state, enquiry, action, *, integration):
    from ledger.models import Attempt, Operation, payload_hash

    payload = {"reference": enquiry.reference, "message": enquiry.message}
    op = Operation.objects.create(
        enquiry=enquiry,
        action=action,
        revision=1,
        idempotency_key=Operation.make_key(enquiry.pk, action, 1),
        payload=payload,
        payload_hash=payload_hash(payload),
        integration=integration,
    )
    system = "system:security-tests"
    paths = {
        "proposed": [],
        "cancelled": ["cancel"],
        "approved": ["approve"],
        "submitted": ["approve", "submit"],
        "confirmed": ["approve", "submit", "confirm"],
        "failed": ["approve", "submit", "fail"],
        "unknown": ["approve", "submit", "mark_unknown"],
    }
    with transaction.atomic():
        for step in paths[state]:
            getattr(op, step)(actor=system, reason="fixture")
        op.save()
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
