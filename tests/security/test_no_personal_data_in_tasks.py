"""No personal data in task arguments, queued payloads, schedules, logs or the journal.

An enquiry with distinctive personal values goes in through the signed endpoint; the ledger
proposes its operations (and, once approved, the CRM write). Every django-q2 row is decoded and
every log record read: none may carry those values. Tasks carry operation IDs only (the
receipt's task, which comes before any operation, its enquiry's ID); the journal is never
redacted (append-only), so it must not hold them either.
"""

import json
import logging
from datetime import UTC, datetime

import pytest
from django.db import transaction
from django.test import Client
from standardwebhooks.webhooks import Webhook

from intake.models import Category, Enquiry

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PERSONAL = {
    "name": "Ottoline Vantreight-Szabo",
    "email": "ottoline.vantreight@example.net",
    "phone": "+44 7700 900983",
    "subject": "Vantreight boiler",
    "message": "The boiler at Quillfeather Cottage has been broken since Sunday.",
}
# Fragments a log line might quote without quoting the whole value.
NEEDLES = [*PERSONAL.values(), "Vantreight", "Quillfeather", "900983"]


def signed_post(client, body: bytes, event_id: str):
    now = datetime.now(UTC)
    signature = Webhook(SECRET).sign(event_id, now, body.decode())
    return client.post(
        "/intake/events/website/",
        data=body,
        content_type="application/json",
        headers={
            "webhook-id": event_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature,
        },
    )


def queued_tasks() -> list[dict]:
    """Every queued task, decoded and its signature checked (a decode failure raises)."""
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    return [
        SignedPackage.loads(payload) for payload in OrmQ.objects.values_list("payload", flat=True)
    ]


def queued_payloads() -> list[str]:
    """Every django-q2 row, decoded: queued tasks (OrmQ), results (Task), schedules."""
    from django_q.models import Schedule, Task

    texts = [repr(task) for task in queued_tasks()]
    texts += [repr((t.func, t.args, t.kwargs, t.result)) for t in Task.objects.all()]
    texts += [repr((s.func, s.args, s.kwargs, s.hook)) for s in Schedule.objects.all()]
    return texts


def find(needles, texts):
    return sorted({n for n in needles for t in texts if n in t})


def assert_nothing_leaked(caplog):
    from ledger.models import JournalEntry

    leaked = find(NEEDLES, queued_payloads())
    assert not leaked, f"personal data in django-q2 payloads: {leaked}"
    log_texts = [caplog.text] + [f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records]
    leaked = find(NEEDLES, log_texts)
    assert not leaked, f"personal data in log records: {leaked}"
    journal = [
        json.dumps({"reason": reason, "evidence": evidence}, default=str)
        for reason, evidence in JournalEntry.objects.values_list("reason", "evidence")
    ]
    leaked = find(NEEDLES, journal)
    assert not leaked, f"personal data in the (append-only) journal: {leaked}"


@pytest.fixture
def received(db, settings, caplog):
    """The enquiry, received through the signed endpoint with every log record captured."""
    from ledger.integrations import ensure_integrations

    settings.INTAKE_SECRETS = {"website": [SECRET]}
    ensure_integrations()
    Category.objects.create(slug="repairs", name="Housing repairs", keywords="boiler\nleak")
    body = json.dumps({**PERSONAL, "service": "repairs", "consent": True}).encode()
    caplog.set_level(logging.DEBUG)
    response = signed_post(Client(), body, "msg_pii_1")
    assert response.status_code == 202, response.content
    repeat = signed_post(Client(), body, "msg_pii_1")  # a redelivery takes its own path
    assert repeat.status_code == 200, repeat.content
    return Enquiry.objects.get(reference=response.json()["reference"])


def test_receipt_puts_no_personal_data_in_tasks_logs_or_journal(received, caplog):
    assert received.email == PERSONAL["email"]  # stored where it belongs
    assert_nothing_leaked(caplog)


def test_approval_puts_no_personal_data_in_tasks_logs_or_journal(received, make_user, caplog):
    from django_q.models import OrmQ

    from ledger import receipt
    from ledger import services as ledger_services
    from ledger.models import Operation
    from ledger.queueing import RECEIPT

    enquiry = received
    reviewer = make_user("reviewer", username="rev")
    # The receipt's task carries the enquiry's ID; taken up, it proposes the acknowledgement
    # (which holds the customer's address) and the rest, each with a task of its own.
    assert [task["args"] for task in queued_tasks()] == [(str(enquiry.pk),)]
    assert receipt.take_up(enquiry.pk)
    proposed = Operation.objects.filter(enquiry=enquiry).count()
    assert proposed > 0
    # Review: the enquiry reaches ready_for_review (the worker's suggestion would do this),
    # and a reviewer approves: the CRM write is proposed, approved and enqueued.
    enquiry.refresh_from_db()
    if enquiry.state == "validated":
        with transaction.atomic():
            enquiry.mark_ready_for_review(actor="system:security-tests")
            enquiry.save()
    # Filed under a category, as the CRM requires before an approval.
    from intake.models import Category

    category, _ = Category.objects.get_or_create(slug="waste", defaults={"name": "Bins"})
    enquiry.revisions.filter(number=enquiry.current_revision).update(category=category)
    ledger_services.approve_revision(enquiry.pk, actor=reviewer, reason="looks right")

    operations = Operation.objects.filter(enquiry=enquiry)
    assert operations.count() > proposed, "approval proposed no operation"
    assert OrmQ.objects.exists(), "nothing was enqueued: the test would prove nothing"
    # The destination needs the personal data, so the ledger holds it: only there.
    assert any(PERSONAL["email"] in json.dumps(op.payload) for op in operations)
    # The design's contract, which makes the scan above hold by construction: a task carries
    # an operation ID and nothing else (the receipt's task, which comes before any operation,
    # the enquiry's ID).
    op_ids = {str(pk) for pk in Operation.objects.values_list("pk", flat=True)}
    for task in queued_tasks():
        args = [str(a) for a in task["args"]]
        ids = {str(enquiry.pk)} if task["func"] == RECEIPT else op_ids
        assert args and set(args) <= ids, f"{task['func']} args {args} are not the IDs it may carry"
        assert not task["kwargs"], f"{task['func']} carries keyword arguments"
    assert_nothing_leaked(caplog)
