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
from ledger.models import Integration, JournalEntry, Op, Operation
from recovery import ownership
from recovery.models import Queue, ResponsePolicy
from recovery.tasks import escalate_overdue
from tests.recovery.test_round_two import card, item_url, text


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
    assert op.state == Op.FAILED and op.owner is None

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
