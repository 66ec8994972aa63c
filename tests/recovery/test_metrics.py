"""The dashboard's figures and /metrics (Prometheus text, read at scrape time)."""

from datetime import timedelta

from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from intake.models import Suggestion
from ledger.models import Operation
from recovery.metrics import figures
from recovery.models import Queue, QueueVisit, ResponsePolicy


def samples(text):
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_metrics_reads_the_database_at_scrape_time(story, client_for, people):
    client = client_for("admin")
    before = samples(client.get("/metrics").content.decode())
    assert before[("handover_queue_items", ())] == 0
    op = story.operation("unknown")
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=5))
    story.operation("failed", action="notify.send", integration="notify")
    story.enquiry("confirmed")
    response = client.get("/metrics")
    assert response["Content-Type"].startswith("text/plain")
    after = samples(response.content.decode())
    assert after[("handover_queue_items", ())] == 2
    assert after[("handover_unresolved_submissions", (("state", "unknown"),))] == 1
    assert after[("handover_unresolved_submissions", (("state", "failed"),))] == 1
    assert after[("handover_queue_oldest_item_age_seconds", ())] >= 5 * 3600 - 5
    assert after[("handover_enquiries_completed_total", ())] >= 1
    assert ("handover_duplicate_actions_prevented_total", ()) in after
    assert ("handover_classification_suggestions", (("outcome", "accepted"),)) in after


def test_metrics_show_receipts_no_worker_has_taken_up(story, client_for):
    from intake.models import Enquiry

    client = client_for("admin")
    before = samples(client.get("/metrics").content.decode())
    assert before[("handover_receipts_pending", ())] == 0
    assert before[("handover_receipt_pending_oldest_age_seconds", ())] == 0
    stuck, fresh = story.enquiry("validated"), story.enquiry("validated")
    Enquiry.objects.filter(pk=stuck.pk).update(
        receipt_pending=True, created_at=timezone.now() - timedelta(minutes=10)
    )
    Enquiry.objects.filter(pk=fresh.pk).update(receipt_pending=True)
    after = samples(client.get("/metrics").content.decode())
    assert after[("handover_receipts_pending", ())] == 2
    assert 600 - 5 <= after[("handover_receipt_pending_oldest_age_seconds", ())] < 700


def test_scrapers_need_the_token(client, db):
    from tests.security.conftest import snapshot

    before = snapshot()
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert b"handover_" not in refused.content  # not one figure to a scraper without the token
    with override_settings(METRICS_TOKEN="s3cret"):
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
        allowed = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
        assert allowed.status_code == 200
        assert ("handover_receipts_pending", ()) in samples(allowed.content.decode())
    with override_settings(METRICS_TOKEN=""):
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert snapshot() == before


def test_manual_recovery_time_and_duplicates(story, client_for):
    op = story.operation("unknown", attention="lookup_failed")
    client_for("coordinator").post(
        reverse("recovery:op-complete", args=[op.pk]),
        {"reason": "found it", "external_id": "CRM-9"},
    )
    f = figures()
    assert f.recoveries == 1
    assert f.median_recovery is not None and f.median_recovery < timedelta(minutes=5)
    assert f.completed == 1
    assert f.duplicates_attempted == f.duplicates_prevented == 0


def test_queue_nobody_opened_is_flagged(story, client_for, people):
    ResponsePolicy.objects.create(queue=Queue.UNKNOWN, review_cadence=timedelta(hours=4))
    # Nothing waiting (a fresh install): nothing was missed, whoever opened what.
    assert not {flag.queue: flag for flag in figures().stale_queues}[Queue.UNKNOWN].stale
    op = story.operation("unknown")
    assert not {flag.queue: flag for flag in figures().stale_queues}[Queue.UNKNOWN].stale
    # The cadence runs from when the oldest waiting item entered the queue.
    type(op).objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=5))
    f = figures()
    flags = {flag.queue: flag for flag in f.stale_queues}
    assert flags[Queue.UNKNOWN].stale and flags[Queue.UNKNOWN].last_opened is None
    html = client_for("admin").get(reverse("recovery:dashboard")).content.decode()
    assert "Nobody has opened" in html

    client_for("coordinator").get(reverse("recovery:queue") + "?state=unknown")
    assert not {flag.queue: flag for flag in figures().stale_queues}[Queue.UNKNOWN].stale
    QueueVisit.objects.update(opened_at=timezone.now() - timedelta(hours=5))
    assert {flag.queue: flag for flag in figures().stale_queues}[Queue.UNKNOWN].stale


def test_classification_quality_is_kept_apart(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    for outcome in ("accepted", "accepted", "overridden"):
        Suggestion.objects.create(
            enquiry=enquiry,
            revision=1,
            provider="keywords",
            label="waste",
            validation="valid",
            review_outcome=outcome,
        )
    quality = figures().classification
    assert (quality["accepted"], quality["overridden"]) == (2, 1)
    html = client_for("admin").get(reverse("recovery:dashboard")).content.decode()
    assert "Classification quality" in html and "kept apart" in html


def test_manual_recovery_time_per_queue_median_and_90th_percentile(story, client_for, people):
    """From the journal: entered the queue -> the person's action that resolved it."""
    from ledger.models import JournalEntry

    now = timezone.now()
    coordinator = people["coordinator"]

    def row(op, at, action, *, from_state="", to_state="", user=None):
        JournalEntry.objects.create(
            subject_type="ledger.operation",
            subject_id=str(op.pk),
            enquiry=op.enquiry,
            action=action,
            from_state=from_state,
            to_state=to_state,
            actor=f"user:{user.username}" if user else "system:tests",
            actor_user=user,
            at=at,
        )

    for minutes in range(1, 11):  # ten unknown writes, resolved by hand after 1..10 minutes
        op = story.operation("confirmed")
        entered = now - timedelta(days=1, hours=minutes)
        row(
            op,
            entered,
            "ledger.operation.outcome_unknown",
            from_state="submitted",
            to_state="unknown",
        )
        row(
            op,
            entered + timedelta(minutes=minutes),
            "ledger.operation.confirm",
            from_state="unknown",
            to_state="confirmed",
            user=coordinator,
        )
    # Asked to reconcile after 30 minutes, confirmed by the worker an hour later: 30 minutes.
    asked = story.operation("confirmed")
    entered = now - timedelta(hours=5)
    row(asked, entered, "x", from_state="submitted", to_state="failed")
    row(
        asked,
        entered + timedelta(minutes=30),
        "recovery.operation.reconcile_requested",
        user=coordinator,
    )
    row(asked, entered + timedelta(minutes=90), "y", from_state="failed", to_state="confirmed")
    # Resolved by the system alone: no manual recovery. Older than 30 days: outside the window.
    alone = story.operation("confirmed")
    row(alone, entered, "x", from_state="submitted", to_state="failed")
    row(alone, entered + timedelta(minutes=1), "y", from_state="failed", to_state="confirmed")
    old = story.operation("confirmed")
    row(old, now - timedelta(days=40), "x", from_state="submitted", to_state="failed")
    row(
        old,
        now - timedelta(days=39),
        "y",
        from_state="failed",
        to_state="cancelled",
        user=coordinator,
    )

    by_queue = {r.queue: r for r in figures().recovery_by_queue}

    unknown, failed = by_queue[Queue.UNKNOWN], by_queue[Queue.FAILED]
    assert (unknown.count, unknown.median, unknown.p90) == (
        10,
        timedelta(minutes=5, seconds=30),
        timedelta(minutes=9),
    )
    assert (failed.count, failed.median, failed.p90) == (
        1,
        timedelta(minutes=30),
        timedelta(minutes=30),
    )
    assert by_queue[Queue.NEEDS_INFORMATION].count == 0
    html = client_for("admin").get(reverse("recovery:dashboard")).content.decode()
    assert "Manual recovery time by queue" in html
    scraped = samples(client_for("admin").get("/metrics").content.decode())
    key = (("quantile", "0.9"), ("queue", "unknown"))
    assert scraped[("handover_manual_recovery_seconds", key)] == 540


def test_approving_a_suggested_category_counts_as_accepted(story, people):
    """The count stayed 0 after four approvals: nothing in the product set the outcome."""
    from ledger.services import approve_revision

    for label in ("waste", "waste", "waste", "waste", "repairs", "unresolved"):
        enquiry = story.enquiry("ready_for_review")  # in the "waste" category
        Suggestion.objects.create(
            enquiry=enquiry, revision=1, provider="keywords", label=label, validation="valid"
        )
        approve_revision(enquiry.pk, actor=people["admin"], reason="checked")

    quality = figures().classification
    assert (quality["accepted"], quality["overridden"], quality["left_unresolved"]) == (4, 1, 1)
