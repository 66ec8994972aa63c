"""Issue 27's defects (and issue 25's "nothing is owned by nobody"), through the console's views.

Each fails on the code before its fix: the defect's number is in the test's name.
"""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from intake.models import Enquiry, EnquiryState
from ledger.execution.outcomes import fail_operation
from ledger.models import Integration, JournalEntry, Operation, OperationState
from recovery import ownership
from recovery.models import Queue, ResponsePolicy
from recovery.tasks import escalate_overdue
from tests.recovery.pages import card, item_url, text


def owner_cell(page) -> str:
    """The item header's Owner, as words."""
    html = re.search(r"<dt>Owner</dt><dd>(.*?)</dd>", page.content.decode(), re.S)[1]
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def queue_row(page, key) -> str:
    html = re.search(rf'<tr[^>]*data-key="{key}".*?</tr>', page.content.decode(), re.S)[0]
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


@pytest.fixture
def failed_to_coordinator(people):
    """The policy table of the demo: Operation failed -> coordinator, backup admin."""
    return ResponsePolicy.objects.create(
        queue=Queue.FAILED,
        owner=people["coordinator"],
        backup_owner=people["admin"],
        response_period=timedelta(hours=4),
    )


# --- 2: new failures go to the queue's owner, with who and why -------------------------------


def test_2_a_new_failure_goes_to_the_failed_queues_owner_not_the_integrations(
    story, people, client_for, failed_to_coordinator
):
    Integration.objects.filter(name="crm").update(owner=people["admin"])
    op = story.operation("submitted")
    enquiry = Enquiry.objects.get(pk=op.enquiry_id)
    op = Operation.objects.select_related("integration").get(pk=op.pk)
    fail_operation(op, enquiry, "system:tests", "retry_budget_exhausted", "503 every time")
    op.save()
    op.refresh_from_db()
    assert op.state == OperationState.FAILED and op.owner is None

    coordinator = client_for("coordinator")
    row = queue_row(coordinator.get(reverse("recovery:queue")), op.pk)
    assert "the-coordinator" in row and "the-admin" not in row
    assert "owns the “Operation failed” queue, by its response policy" in row
    mine = coordinator.get(reverse("recovery:queue") + "?mine=1").content.decode()
    assert f'data-key="{op.pk}"' in mine
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=5))
    overdue = coordinator.get(reverse("recovery:queue") + "?mine=1&overdue=1").content.decode()
    assert f'data-key="{op.pk}"' in overdue


def test_2_every_assignment_says_who_when_and_why(story, people, client_for):
    op = story.operation("failed", attention="retry_budget_exhausted")
    coordinator = client_for("coordinator")
    coordinator.post(
        reverse("recovery:op-reassign", args=[op.pk]),
        {"reason": "she knows this CRM", "owner": people["reviewer"].pk},
    )
    row = queue_row(coordinator.get(reverse("recovery:queue")), op.pk)
    assert re.search(r"assigned by the-coordinator at .+: “she knows this CRM”", row), row
    assert "the-reviewer" in row


# --- 7 and issue 25 §3: one effective owner everywhere; never "nobody" ------------------------


def test_7_a_failed_acknowledgement_names_one_owner_in_header_card_row_and_list(
    story, people, client_for
):
    ResponsePolicy.objects.create(
        queue=Queue.FAILED,
        owner=people["coordinator"],
        backup_owner=people["admin"],
        response_period=timedelta(hours=2),
    )
    enquiry = story.enquiry("confirmed")
    op = story.operation(
        "failed",
        enquiry=enquiry,
        action="notify.send",
        integration="notify",
        attention="retry_budget_exhausted",
    )
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=3))
    assert escalate_overdue() == 1

    coordinator = client_for("coordinator")
    page = coordinator.get(item_url(op))
    header = owner_cell(page)
    assert "the-admin" in header and "escalated from the-coordinator" in header
    assert "nobody" not in header
    assert "the-admin" in unescape(card(page, op))
    assert "the-admin" in queue_row(coordinator.get(reverse("recovery:queue")), op.pk)
    listed = text(coordinator.get(reverse("recovery:enquiries"), {"q": enquiry.reference}))
    assert re.search(rf"{enquiry.reference} .* the-admin", listed), listed


def test_7_the_enquiries_list_names_the_queues_owner_as_the_queue_row_does(
    story, people, client_for
):
    ResponsePolicy.objects.create(
        queue=Queue.UNKNOWN, owner=people["coordinator"], response_period=timedelta(hours=2)
    )
    op = story.operation("unknown", attention="lookup_failed")
    coordinator = client_for("coordinator")
    assert "the-coordinator" in queue_row(coordinator.get(reverse("recovery:queue")), op.pk)
    listed = text(coordinator.get(reverse("recovery:enquiries")))
    line = listed[listed.index(op.enquiry.reference) :][:200]
    assert "the-coordinator" in line and "nobody" not in listed


def test_25_an_item_whose_queue_has_no_owner_falls_to_the_admins_and_says_so(
    story, people, client_for
):
    assert not ResponsePolicy.objects.exists()
    op = story.operation("unknown", attention="lookup_failed")
    coordinator = client_for("coordinator")
    row = queue_row(coordinator.get(reverse("recovery:queue")), op.pk)
    assert "admins" in row and "no owner is set for the “Operation outcome unknown” queue" in row
    page = coordinator.get(item_url(op))
    assert "admins" in owner_cell(page) and "nobody" not in owner_cell(page)
    assert "falls to the admins" in unescape(card(page, op))
    # In every admin's Mine; in nobody else's.
    assert f'data-key="{op.pk}"' in client_for("admin").get("/console/?mine=1").content.decode()
    assert f'data-key="{op.pk}"' not in coordinator.get("/console/?mine=1").content.decode()
    # The one function others (e-mail to owners) ask: who is told.
    owner = ownership.item_owner(Operation.objects.get(pk=op.pk))
    assert owner.to_admins and owner.people() == [people["admin"]]
    assert owner.label == "admins"


def test_25_an_item_in_no_queue_is_not_sent_to_the_admins(story):
    op = story.operation("confirmed")
    owner = ownership.item_owner(op)
    assert not owner.queued and owner.people() == []
    enquiry = Enquiry.objects.get(pk=op.enquiry_id)
    assert enquiry.state == EnquiryState.CONFIRMED
    assert not ownership.item_owner(enquiry).queued
    assert not JournalEntry.objects.filter(action="recovery.escalated").exists()


# --- 1: no dead end after "Cancel"; what changed comes from what was observed -----------------


def duplicates_in_submission_unknown(story):
    """The demo's case: a look-up found two records for the reference."""
    enquiry = story.enquiry("submission_unknown")
    op = story.operation("failed", enquiry=enquiry, attention="duplicate_records")
    Operation.objects.filter(pk=op.pk).update(result={"duplicates": ["CRM-7", "CRM-8"]})
    return Operation.objects.get(pk=op.pk)


@pytest.mark.parametrize("role", ["coordinator", "reviewer", "admin"])
def test_1_no_cancel_where_the_destination_was_seen_to_hold_records(story, client_for, role):
    op = duplicates_in_submission_unknown(story)
    page = client_for(role).get(item_url(op))
    here = unescape(card(page, op))
    assert f'id="act-{op.pk}-cancel"' not in here
    assert "Cancel and close" not in here and "Cancel (" not in here
    words = text(page)
    assert "Yes, more than once: the CRM holds 2 records" in words
    assert "CRM-7, CRM-8" in words
    assert "did not accept" not in words
    response = client_for("admin").post(
        reverse("recovery:op-cancel", args=[op.pk]), {"reason": "not needed"}
    )
    assert response.status_code == 409
    op.refresh_from_db()
    assert op.state == OperationState.FAILED


def test_1_cancelling_a_queued_retry_closes_the_enquiry_it_was_waiting_on(story, client_for):
    enquiry = story.enquiry("submission_unknown")
    op = story.operation("approved", enquiry=enquiry)
    reviewer = client_for("reviewer")
    page = reviewer.get(item_url(op))
    assert "Cancel and close the enquiry" in text(page)
    reviewer.post(reverse("recovery:op-cancel", args=[op.pk]), {"reason": "resident withdrew"})
    enquiry.refresh_from_db()
    op.refresh_from_db()
    assert op.state == OperationState.CANCELLED
    assert enquiry.state == EnquiryState.REJECTED and enquiry.closed_at is not None


# --- 3: only what the person may do; refusals in words for people ----------------------------


def failed_never_received(story, n, *, attention="retry_budget_exhausted", error="transient"):
    ops = []
    for _ in range(n):
        op = story.operation("failed", attention=attention)
        Operation.objects.filter(pk=op.pk).update(last_error_class=error, last_error_status=503)
        ops.append(op)
    return ops


def test_3_the_owner_of_failed_work_retries_a_write_the_destination_never_received(
    story, client_for
):
    ops = failed_never_received(story, 3)
    coordinator = client_for("coordinator")
    assert ">Retry<" in coordinator.get(item_url(ops[0])).content.decode()
    response = coordinator.post(
        reverse("recovery:bulk"),
        {
            "action": "retry",
            "reason": "CRM is back",
            "group": "crm~failed~retry_budget_exhausted~transient~503",
        },
    )
    assert "Retry: 3 done, 0 refused" in text(coordinator.get(response["Location"]))
    assert set(
        Operation.objects.filter(pk__in=[o.pk for o in ops]).values_list("state", flat=True)
    ) == {OperationState.APPROVED}


def test_3_the_bulk_menu_offers_only_what_the_person_may_do_and_says_who_may(story, client_for):
    failed_never_received(story, 2, attention="auth", error="auth")
    coordinator = client_for("coordinator")
    html = coordinator.get(reverse("recovery:queue")).content.decode()
    menu = html[html.index('id="b-action"') :].split("</select>", 1)[0]
    assert 'value="retry"' not in menu and 'value="reassign"' in menu
    assert "Retry: only an admin or a holder of the recovery permission may" in (unescape(html))


def test_3_a_refusal_names_who_may_never_a_permission_code(story, client_for):
    (op,) = failed_never_received(story, 1, attention="auth", error="auth")
    coordinator = client_for("coordinator")
    response = coordinator.post(
        reverse("recovery:bulk"), {"action": "retry", "reason": "try", "item": f"operation:{op.pk}"}
    )
    words = text(coordinator.get(response["Location"]))
    assert "only an admin or a holder of the recovery permission may" in words
    assert "ledger.recover_operation" not in words and "user:" not in words
    page = coordinator.get(item_url(op))
    assert "recover_operation" not in text(page)


# --- 12, 16: the Cancel label and Reconcile's consequence, before the click -------------------


def test_12_cancel_on_an_enquiry_that_is_not_waiting_on_the_write_says_it_stays(story, client_for):
    enquiry = story.enquiry("confirmed")
    op = story.operation(
        "failed",
        enquiry=enquiry,
        action="notify.send",
        integration="notify",
        attention="retry_budget_exhausted",
    )
    words = text(client_for("coordinator").get(item_url(op)))
    assert "Cancel (enquiry stays Confirmed)" in words
    assert f"{enquiry.reference} stays Confirmed" in words


def test_16_reconciles_consequence_is_shown_beside_the_button_not_folded(story, client_for):
    Integration.objects.filter(name="crm").update(
        supports_lookup=True, supports_idempotency_key=True, settle_delay_seconds=0
    )
    op = story.operation("unknown", attention="lookup_failed")
    html = card(client_for("coordinator").get(item_url(op)), op)
    visible = re.sub(r"<details.*?</details>", "", html, flags=re.S)
    visible = unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", visible)))
    assert "Reconcile now: Asks the CRM for the record by its reference" in visible
    assert "sent again with the same idempotency key" in visible


# --- 15: stale evidence says when it was seen, and offers the look-up --------------------------


def test_15_old_lookup_evidence_says_when_and_offers_reconcile_when_lookup_works_now(
    story, client_for
):
    from ledger.models import Attempt

    Integration.objects.filter(name="crm").update(supports_lookup=True)
    op = story.operation("unknown", attention="lookup_unavailable")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Attempt.objects.create(
        operation=op,
        number=1,
        kind="lookup",
        worker="tests",
        outcome="lookup_unavailable",
        response_status=501,
        started_at=an_hour_ago,
    )
    words = text(client_for("coordinator").get(item_url(op)))
    assert re.search(r"exists \(seen \d+ \w+ \d{4}, \d\d:\d\d \w+, HTTP 501\)", words), words
    assert "The CRM can be looked up now: Reconcile now asks it." in words
    assert "Reconcile now: the CRM could not be asked before" in words


# --- 17: the dashboard agrees with the queue -----------------------------------------------------


def test_17_dashboard_links_only_to_lists_that_hold_what_it_counts(story, client_for):
    ResponsePolicy.objects.create(queue=Queue.SUBMISSION_UNKNOWN, review_cadence=timedelta(hours=4))
    op = duplicates_in_submission_unknown(story)
    Operation.objects.filter(pk=op.pk).update(state=OperationState.UNKNOWN)
    # Waiting longer than the cadence, with nobody opening the queue (an empty queue, or one
    # whose work arrived within the cadence, is never flagged).
    Enquiry.objects.filter(pk=op.enquiry_id).update(
        state_changed_at=timezone.now() - timedelta(hours=5)
    )
    words = text(client_for("admin").get(reverse("recovery:dashboard")))
    assert "1 enquiry waits in this state as its CRM write's row" in words
    assert (
        "?state=submission_unknown"
        not in client_for("admin").get(reverse("recovery:dashboard")).content.decode()
    )
    assert re.search(r"Duplicate records found at a destination \(not prevented\) 1\b", words)


# --- 18: the hand-off is the main action when the owner cannot take the safe step -------------


def test_18_a_coordinator_who_cannot_retry_is_offered_the_handover_open_and_prefilled(
    story, people, client_for
):
    (op,) = failed_never_received(story, 1, attention="auth", error="auth")
    html = card(client_for("coordinator").get(item_url(op)), op)
    form = re.search(r'<form class="handoff".*?</form>', html, re.S)
    assert form, "no hand-over form"
    form = form[0]
    assert f'name="owner" value="{people["admin"].pk}"' in form
    assert "Hand over to the-admin" in form and "needs the-admin to retry" in form
    assert "<details" not in form
    assert 'class="primary"' in form
    client_for("coordinator").post(
        reverse("recovery:op-reassign", args=[op.pk]),
        {"owner": people["admin"].pk, "reason": "needs the-admin to retry: I may not"},
    )
    op.refresh_from_db()
    assert op.owner == people["admin"]
    # An admin may retry it: no hand-over for them.
    assert 'class="handoff"' not in card(client_for("admin").get(item_url(op)), op)


# --- 14: the queue says what changed owner since it was last opened ---------------------------


def test_14_the_queue_says_items_moved_away_since_it_was_last_opened(story, people, client_for):
    ResponsePolicy.objects.create(
        queue=Queue.UNKNOWN,
        owner=people["coordinator"],
        backup_owner=people["admin"],
        response_period=timedelta(hours=2),
    )
    op = story.operation("unknown", attention="lookup_failed")
    coordinator = client_for("coordinator")
    assert 'id="moved"' not in coordinator.get(reverse("recovery:queue")).content.decode()
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=3))
    assert escalate_overdue() == 1
    words = text(coordinator.get(reverse("recovery:queue")))
    assert "1 item changed owner from you to the-admin (escalated: overdue)" in words
    assert "changed owner" not in text(coordinator.get(reverse("recovery:queue")))


def test_14_the_demo_starts_with_nothing_left_to_escalate(demo):
    assert escalate_overdue() == 0
    coordinator_items = JournalEntry.objects.filter(action="recovery.escalated")
    assert coordinator_items.exists()  # what was overdue at the seed was escalated then
