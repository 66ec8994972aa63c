"""The item page's four answers, from evidence."""

from django.urls import reverse

from ledger.models import JournalEntry
from recovery import explain


def page(client, enquiry):
    return client.get(reverse("recovery:enquiry", args=[enquiry.reference]))


def test_unknown_write_says_maybe_and_reconcile_first(story, client_for):
    op = story.operation("unknown", attempts=["uncertain"])
    response = page(client_for("coordinator"), op.enquiry)
    answers = response.context["answers"]
    assert "Deliver revision 1" in answers.trying
    assert any(s.label == "Written to the CRM" and s.status == "uncertain" for s in answers.steps)
    assert any("Maybe." in line for line in answers.changed)
    assert any("Reconcile now" in line and "blind retry" in line for line in answers.safe)
    html = response.content.decode()
    assert "What was the workflow trying to do?" in html
    assert reverse("recovery:runbook", args=["unknown-outcome"]) in html


def test_failed_invalid_says_no_and_do_not_retry(story, client_for):
    op = story.operation("failed", attention="invalid", attempts=["invalid"])
    assert explain.external_change(op).startswith("No.")
    assert "Do not retry" in explain.safe_now(op)
    assert explain.runbook_for_operation(op) == "invalid-request"


def test_confirmed_says_yes_with_the_reference(story):
    op = story.operation("confirmed")
    op.external_id = "CRM-5"
    assert explain.external_change(op).startswith("Yes.")
    assert "CRM-5" in explain.external_change(op)


def test_nothing_sent_yet(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    answers = page(client_for("reviewer"), enquiry).context["answers"]
    assert answers.changed == ["No. Nothing has been sent to an external system yet."]
    assert answers.safe[0].startswith("Review it")


def test_approval_is_the_finished_step(story, client_for):
    op = story.operation("failed", attempts=["transient", "transient"])
    answers = page(client_for("coordinator"), op.enquiry).context["answers"]
    assert answers.finished.startswith("Reviewed and approved (revision 1 by story-reviewer")
    assert "failed" in answers.finished
    assert JournalEntry.objects.filter(enquiry=op.enquiry).exists()


def test_operation_url_focuses_the_item_page(story, client_for):
    op = story.operation("unknown")
    response = client_for("coordinator").get(
        reverse("recovery:operation", args=[op.pk]) + "?action=reconcile"
    )
    assert response["Location"] == (
        reverse("recovery:enquiry", args=[op.enquiry.reference])
        + f"?op={op.pk}&action=reconcile#op-{op.pk}"
    )
    html = client_for("coordinator").get(response["Location"]).content.decode()
    assert f'open id="act-{op.pk}-reconcile"' in html  # the form is unfolded, ready


def test_technical_detail_is_folded_away(story, client_for):
    op = story.operation("failed", attempts=["transient"])
    html = page(client_for("coordinator"), op.enquiry).content.decode()
    assert '<details class="technical"><summary>Technical detail' in html
    assert op.idempotency_key in html
