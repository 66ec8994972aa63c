"""The demo seed fills every queue and state; every runbook exists and is linked."""

import pytest
from django.conf import settings
from django.urls import reverse

from intake.models import Enquiry, EnquiryState
from ledger.models import Operation, OperationState
from recovery import queue
from recovery.explain import RUNBOOKS
from recovery.markdown import render
from recovery.models import Queue


def test_demo_puts_something_in_every_queue_and_state(demo):
    assert set(Enquiry.objects.values_list("state", flat=True)) == set(EnquiryState.values)
    assert set(Operation.objects.values_list("state", flat=True)) == set(OperationState.values)
    queues = {row["q_queue"] for row in queue.all_rows()}
    assert queues == set(Queue.values) - {Queue.REVIEW}
    assert Enquiry.objects.filter(state=EnquiryState.READY_FOR_REVIEW).exists()
    test_001 = Enquiry.objects.get(reference="TEST-001")
    assert test_001.state == EnquiryState.SUBMISSION_UNKNOWN
    assert test_001.operations.get(action="crm.create_enquiry").state == OperationState.UNKNOWN
    # Every enquiry with an address was acknowledged when it arrived (as the receipt does).
    with_address = Enquiry.objects.exclude(email="")
    acknowledged = Operation.objects.filter(
        action="notify.send", payload__template="enquiry_received"
    )
    assert acknowledged.count() == with_address.count()
    assert {op.enquiry_id for op in acknowledged} == {e.pk for e in with_address}


def test_demo_history_is_dated_in_the_past(demo):
    from ledger.models import JournalEntry

    test_001 = Enquiry.objects.get(reference="TEST-001")
    rows = list(JournalEntry.objects.filter(enquiry=test_001).order_by("at"))
    assert rows[0].at < rows[-1].at  # not all at one moment
    # The clock is back: what happens now is stamped now.
    from django.utils import timezone

    assert Enquiry.objects.create(source="x", message="now").created_at > rows[-1].at
    assert (
        abs((timezone.now() - Enquiry.objects.latest("created_at").created_at).total_seconds()) < 60
    )


def test_demo_journal_is_stamped_at_each_steps_minute(demo):
    """The story's minutes are the journal's: TEST-001 from arrival to submission unknown."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger.models import JournalEntry

    test_001 = Enquiry.objects.get(reference="TEST-001")
    arrived = test_001.created_at
    assert abs(timezone.now() - timedelta(hours=1.5) - arrived) < timedelta(minutes=1)
    rows = JournalEntry.objects.filter(enquiry=test_001).order_by("at", "id")
    assert [(row.action, round((row.at - arrived).total_seconds(), 3)) for row in rows] == [
        # The acknowledgement, sent when it arrived.
        ("ledger.operation.approve", 1.2),
        ("ledger.operation.submit", 1.8),
        ("ledger.operation.confirm", 2.4),
        ("intake.enquiry.validate", 6),
        ("intake.enquiry.mark_ready_for_review", 24),
        ("intake.enquiry.approve", 720),
        ("ledger.operation.approve", 726),
        ("ledger.operation.submit", 732),
        ("ledger.operation.mark_unknown", 744),
        ("intake.enquiry.submit", 744),
        ("intake.enquiry.mark_submission_unknown", 750),
        ("intake.enquiry.assigned", 810),  # a minute after its last entry: the owner took it
    ]
    attempts = test_001.operations.get(action="crm.create_enquiry").attempts.order_by("number")
    assert [(a.started_at - arrived, a.ended_at - a.started_at) for a in attempts] == [
        (timedelta(minutes=12.2), timedelta(seconds=10)),
        (timedelta(minutes=13), timedelta(seconds=0.2)),
    ]


def test_seed_demo_is_idempotent(demo):
    from io import StringIO

    from django.core.management import call_command

    count = Enquiry.objects.count()
    call_command("seed_demo", stdout=StringIO())
    assert Enquiry.objects.count() == count


@pytest.mark.parametrize("slug", sorted(RUNBOOKS))
def test_every_runbook_exists_and_renders(slug, client_for):
    path = settings.BASE_DIR / "docs" / "runbooks" / f"{slug}.md"
    assert path.exists(), path
    response = client_for("coordinator").get(reverse("recovery:runbook", args=[slug]))
    assert response.status_code == 200
    assert "<h2>" in response.content.decode() or "<h1>" in response.content.decode()


def test_unknown_runbook_is_404(client_for):
    from tests.security.conftest import snapshot

    before = snapshot()
    response = client_for("coordinator").get("/console/runbooks/nope/")
    assert response.status_code == 404
    assert snapshot() == before


def test_failure_runbooks_follow_the_five_steps():
    for slug in RUNBOOKS:
        if slug in ("pause-procedure", "queue-owners"):
            continue
        text = (settings.BASE_DIR / "docs" / "runbooks" / f"{slug}.md").read_text().lower()
        for words in ("locate the original event", "inspect", "decide", "record the outcome"):
            assert words in text, f"{slug}: {words}"


def test_markdown_escapes_and_links_siblings():
    html = render("# T\n\nSee [x](unknown-outcome.md) and <b>bold</b> `code`.\n\n- a\n- b\n")
    assert '<a href="../unknown-outcome/">x</a>' in html
    assert "&lt;b&gt;" in html and "<code>code</code>" in html
    assert "<ul><li>a</li><li>b</li></ul>" in html
    assert '<a href="#">y</a>' in render("[y](javascript:alert(1))")


def test_markdown_passes_no_raw_html_and_no_foreign_links():
    html = render(
        '<script>alert(1)</script>\n\n<img src=x onerror="alert(1)"> [d](data:text/html,x)'
    )
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html and '<a href="#">d</a>' in html
    assert "<img" not in render("![alt](https://example.com/i.png)")  # images are off
    assert render("## Deep") == "<h3>Deep</h3>"  # the page title is the h1


@pytest.mark.slow
def test_every_record_the_demo_names_is_at_the_sandbox(db, sandbox, monkeypatch):
    """Seeded as `make run` seeds (--make-records, against a real sandbox process): every
    external ID the demo's CRM operations, attempts and journal name is found at the sandbox
    by its look-up, and the duplicate item's two records carry its one reference."""
    import io
    import re

    import requests
    from django.core.management import call_command

    from ledger.integrations import ensure_integrations
    from ledger.models import Attempt, Integration, JournalEntry

    ensure_integrations()
    Integration.objects.filter(name__in=("crm", "notify", "documents")).update(
        base_url=sandbox.url, token=""
    )
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-for-records")
    call_command("seed_demo", make_records=True, stdout=io.StringIO())

    crm = Operation.objects.filter(integration__name="crm")
    named = set(crm.exclude(external_id="").values_list("external_id", flat=True))
    for result in crm.values_list("result", flat=True):
        named.update((result or {}).get("duplicates", []))
    texts = [
        *Attempt.objects.filter(operation__in=crm).values_list("response_body", flat=True),
        *(str(e.reason) + str(e.evidence) for e in JournalEntry.objects.all()),
    ]
    pattern = re.compile(r"\b(?:crm_[0-9a-f]+|CRM-\d+)\b")
    for text in texts:
        named.update(pattern.findall(text))
    assert len(named) == 4, named  # the confirmed two and the duplicate pair
    assert not any(name.startswith("CRM-") for name in named), named
    for record in named:
        answer = requests.get(f"{sandbox.url}/crm/enquiries/{record}", timeout=10)
        assert answer.status_code == 200, record
    assert sandbox.stats()["crm"]["total"] == 4
    messages = set(
        Operation.objects.filter(action="notify.send")
        .exclude(external_id="")
        .values_list("external_id", flat=True)
    )
    # Every acknowledgement the demo shows as sent (one per enquiry with an address).
    sent = Operation.objects.filter(action="notify.send", state="confirmed")
    assert len(messages) == sent.count() > 1, messages
    assert not any(m.startswith("MSG-") for m in messages), messages
    for message in messages:
        answer = requests.get(f"{sandbox.url}/notify/messages/{message}", timeout=10)
        assert answer.status_code == 200, message
    assert sandbox.stats()["notify"]["total"] == len(messages)
    duplicates = crm.get(attention="duplicate_records")
    reference = duplicates.enquiry.reference
    found = requests.get(
        f"{sandbox.url}/crm/enquiries", params={"reference": reference}, timeout=10
    )
    assert sorted(r["id"] for r in found.json()["results"]) == sorted(
        duplicates.result["duplicates"]
    )


def test_a_sweep_right_after_seeding_leaves_the_in_flight_example_in_flight(demo):
    """The demo's call in flight holds a live lease (a worker on another machine): the sweep
    `recover` runs does not make it unknown."""
    from django.utils import timezone

    from ledger.sweeper import sweep

    in_flight = list(Operation.objects.filter(state=OperationState.SUBMITTED))
    assert len(in_flight) == 1
    op = in_flight[0]
    assert op.lease_owner and op.lease_expires_at > timezone.now()
    report = sweep(actor="system:tests")
    assert report.lost_in_flight == []
    op.refresh_from_db()
    assert op.state == OperationState.SUBMITTED and op.enquiry.state == EnquiryState.SUBMITTED


def test_a_sweep_right_after_seeding_leaves_the_held_approved_example_waiting(demo):
    """The demo's durable "approved, waiting" example is the read held by the paused document
    store (the page says why it waits): a sweep neither sends it nor changes it. The CRM write
    approved a few minutes ago ("Fly-tipping") is due, and a sweep queues it: a running worker
    sends it, as the story says."""
    from ledger.sweeper import sweep

    held = list(Operation.objects.filter(state=OperationState.APPROVED, held=True))
    assert len(held) == 1
    op = held[0]
    assert op.integration.paused and op.integration.pause_reason
    report = sweep(actor="system:tests")
    assert str(op.pk) not in report.executions_enqueued + report.held
    op.refresh_from_db()
    assert (op.state, op.held, op.attempt_count) == (OperationState.APPROVED, True, 0)
    due = Operation.objects.get(enquiry__subject="Fly-tipping", action="crm.create_enquiry")
    assert str(due.pk) in report.executions_enqueued


@pytest.mark.slow
def test_releasing_the_demos_held_document_read_reads_the_document(db, sandbox, monkeypatch):
    """Seeded as `make run` seeds, the document store resumed and its one held read released
    by an admin: the read names its document, finds it at the store and confirms (no crash
    inside Handover, nothing for a person); the store holds the one document it read."""
    import io

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from intake.models import Document
    from ledger import services
    from ledger.execution.executing import execute
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration

    ensure_integrations()
    Integration.objects.filter(name__in=("crm", "notify", "documents")).update(
        base_url=sandbox.url, token=""
    )
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-for-records")
    call_command("seed_demo", make_records=True, stdout=io.StringIO())
    admin = get_user_model().objects.get(username="admin")
    held = Operation.objects.get(integration__name="documents", held=True)
    assert held.payload["document_id"] and held.payload["version"] == "1"

    services.resume_integration("documents", actor=admin, reason="vendor fixed it")
    services.release_backlog("documents", actor=admin, reason="checked", operation_ids=[held.pk])
    execute(held.pk)

    held.refresh_from_db()
    assert (held.state, held.attention, held.last_error_class) == ("confirmed", "", "")
    document = Document.objects.get(enquiry=held.enquiry)
    assert document.status == "extracted"
    assert sandbox.stats()["docs"]["total"] == 1


def test_the_queue_owners_runbook_points_at_the_setup_page_and_says_a_fresh_install_has_none():
    text = (settings.BASE_DIR / "docs" / "runbooks" / "queue-owners.md").read_text()
    assert "Admin →" not in text
    assert "*Setup* page" in text and "A fresh install has none" in text


def test_the_demo_leaves_no_integration_without_an_owner(demo):
    from recovery.readiness import integrations_without_owner

    assert integrations_without_owner() == []
