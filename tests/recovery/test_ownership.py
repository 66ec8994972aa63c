"""Owner changes are said: reassigning an item its queue's policy gave a person (no owner by
name) journals that person as the one it came from, and their queue page says it moved."""

import re

from django.urls import reverse

from ledger.models import JournalEntry
from recovery.models import Queue, ResponsePolicy


def words(response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def test_reassigning_an_item_the_policy_gave_says_whom_it_came_from(story, people, client_for):
    ResponsePolicy.objects.create(queue=Queue.UNKNOWN, owner=people["coordinator"])
    op = story.operation("unknown", attention="lookup_failed")
    assert op.owner is None
    coordinator = client_for("coordinator")
    assert "changed owner" not in words(coordinator.get(reverse("recovery:queue")))

    answer = client_for("admin").post(
        reverse("recovery:op-reassign", args=[op.pk]),
        {"owner": people["admin"].pk, "reason": "I will look at the CRM myself"},
    )
    assert answer.status_code == 302
    row = JournalEntry.objects.get(action="recovery.operation.reassigned", subject_id=str(op.pk))
    assert row.evidence == {"from": "the-coordinator", "to": "the-admin"}
    assert "1 item changed owner from you to the-admin" in words(
        coordinator.get(reverse("recovery:queue"))
    )


def test_reassigning_an_enquiry_the_policy_gave_says_whom_it_came_from(story, people, client_for):
    ResponsePolicy.objects.create(queue=Queue.REVIEW, owner=people["reviewer"])
    enquiry = story.enquiry("ready_for_review")
    answer = client_for("admin").post(
        reverse("recovery:enquiry-assign", args=[enquiry.reference]),
        {"owner": people["coordinator"].pk, "reason": "the reviewer is away today"},
    )
    assert answer.status_code == 302
    row = JournalEntry.objects.get(action="intake.enquiry.assigned", subject_id=str(enquiry.pk))
    assert row.evidence == {"from": "the-reviewer", "to": "the-coordinator"}
