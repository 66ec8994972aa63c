"""A resident's reply nobody could attach: a row in the console's queue with an owner (its
queue's policy, else the admins), its own page, attached or set aside by a person with a
reason; escalated like any other row when overdue."""

from datetime import timedelta

import pytest
from django.utils import timezone

from intake import answers
from intake.models import Enquiry, EnquiryState
from intake.residentmodels import AnswerChannel, AnswerState, ResidentAnswer
from ledger.models import JournalEntry
from recovery import queue
from recovery.models import Queue, ResponsePolicy
from recovery.tasks import escalate_overdue

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x02" * 16


def unmatched(text="Is this about my bins? Ana"):
    return answers.receive_answer(
        None,
        channel=AnswerChannel.EMAIL,
        text=text,
        uploads=[answers.Upload("photo.png", PNG)],
        sender="someone@example.net",
        subject="Re: bins",
        provider_token=f"tok-{text[:8]}",
    )


def test_an_unmatched_reply_is_a_queue_row_with_its_queues_owner(people):
    ResponsePolicy.objects.create(queue=Queue.WAITING_REPLY, owner=people["coordinator"])
    answer = unmatched()
    rows = [r for r in queue.all_rows() if r["q_kind"] == queue.KIND_ANSWER]
    assert [(r["q_key"], r["q_queue"], r["q_owner"]) for r in rows] == [
        (str(answer.pk), Queue.WAITING_REPLY, people["coordinator"].pk)
    ]


def test_without_a_policy_an_unmatched_reply_falls_to_the_admins(client_for):
    answer = unmatched()
    page = client_for("coordinator").get("/console/?state=waiting_reply")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"/console/replies/{answer.pk}/" in text
    assert "admins" in text


def test_the_reply_page_shows_it_and_attaches_it_to_the_enquiry_named(client_for, story):
    enquiry = story.enquiry("needs_information")
    answer = unmatched()
    client = client_for("reviewer")
    page = client.get(f"/console/replies/{answer.pk}/")
    assert page.status_code == 200
    assert "Is this about my bins?" in page.content.decode()
    enquiries = Enquiry.objects.count()
    response = client.post(
        f"/console/replies/{answer.pk}/attach/",
        {"reference": enquiry.reference.lower(), "reason": "same street as ENQ in the subject"},
    )
    assert response.status_code == 302
    answer.refresh_from_db()
    enquiry.refresh_from_db()
    assert answer.state == AnswerState.ATTACHED and answer.enquiry == enquiry
    assert enquiry.current_revision == 2 and enquiry.state == EnquiryState.READY_FOR_REVIEW
    assert "Is this about my bins?" in enquiry.revision.fields["message"]
    assert Enquiry.objects.count() == enquiries
    entry = JournalEntry.objects.get(
        enquiry_id=enquiry.pk, action="intake.enquiry.resident_answered"
    )
    assert entry.actor == "user:the-reviewer"
    assert not [r for r in queue.all_rows() if r["q_kind"] == queue.KIND_ANSWER]


def test_attaching_needs_a_reason_and_the_review_permission(client_for, story):
    enquiry = story.enquiry("needs_information")
    answer = unmatched()
    client_for("reviewer").post(
        f"/console/replies/{answer.pk}/attach/", {"reference": enquiry.reference, "reason": " "}
    )
    response = client_for("coordinator").post(
        f"/console/replies/{answer.pk}/attach/", {"reference": enquiry.reference, "reason": "x"}
    )
    assert response.status_code == 403
    answer.refresh_from_db()
    assert answer.state == AnswerState.UNMATCHED
    enquiry.refresh_from_db()
    assert enquiry.current_revision == 1


def test_a_reply_cannot_be_attached_to_an_enquiry_already_passed_on(client_for, story):
    enquiry = story.enquiry("approved")
    answer = unmatched()
    client_for("reviewer").post(
        f"/console/replies/{answer.pk}/attach/", {"reference": enquiry.reference, "reason": "x"}
    )
    answer.refresh_from_db()
    assert answer.state == AnswerState.UNMATCHED
    enquiry.refresh_from_db()
    assert enquiry.current_revision == 1


def test_the_review_page_lists_the_residents_answers_and_their_documents(client_for, story):
    enquiry = story.enquiry("needs_information")
    answer = answers.receive_answer(
        enquiry.pk, channel="page", text="here", uploads=[answers.Upload("plan.png", PNG)]
    )
    page = client_for("reviewer").get(f"/console/review/{enquiry.reference}/").content.decode()
    assert "From the resident" in page
    assert f"/console/replies/{answer.pk}/files/{answer.files.get().pk}/" in page


def test_set_aside_leaves_the_queue_and_is_kept(client_for):
    answer = unmatched()
    client_for("reviewer").post(
        f"/console/replies/{answer.pk}/set-aside/", {"reason": "an out-of-office reply"}
    )
    answer.refresh_from_db()
    assert answer.state == AnswerState.SET_ASIDE
    assert ResidentAnswer.objects.count() == 1
    assert JournalEntry.objects.filter(
        subject_id=str(answer.pk), action="intake.answer.set_aside", actor="user:the-reviewer"
    ).exists()


def test_a_residents_document_is_downloaded_never_rendered(client_for):
    answer = unmatched()
    document = answer.files.get()
    response = client_for("coordinator").get(f"/console/replies/{answer.pk}/files/{document.pk}/")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response.content == PNG
    assert client_for(None).get(f"/console/replies/{answer.pk}/").status_code == 302


def test_an_overdue_reply_is_escalated_to_the_backup_owner(people):
    ResponsePolicy.objects.create(
        queue=Queue.WAITING_REPLY,
        owner=people["coordinator"],
        backup_owner=people["admin"],
        response_period=timedelta(hours=1),
    )
    answer = unmatched()
    ResidentAnswer.objects.filter(pk=answer.pk).update(
        state_changed_at=timezone.now() - timedelta(hours=2)
    )
    assert escalate_overdue() == 1
    answer.refresh_from_db()
    assert answer.owner == people["admin"]
    assert escalate_overdue() == 0
