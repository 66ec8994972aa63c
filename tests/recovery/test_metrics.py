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
