"""The review page's decisions (issue 27): a refused decision is answered where the reviewer
acted, and "Next waiting" skips what this reviewer cannot decide."""

import re

from django.urls import reverse
from django.utils import timezone

from intake import services as intake_services
from intake.models import Enquiry


def _nav_current(html: str) -> list[str]:
    return re.findall(r'<a href="[^"]+" aria-current="page">([^<]+)</a>', html)


def test_a_refused_approve_on_the_review_page_is_answered_at_the_decide_card(story, client_for):
    # Issue 27, defect 5: the answer opened at the top of the approve address, the message at
    # y≈1090 of a 900-px window, and the nav said "Enquiries".
    enquiry = story.enquiry("needs_information")
    client = client_for("reviewer")
    page = client.get(reverse("recovery:review-item", args=[enquiry.reference])).content.decode()
    approve = reverse("recovery:enquiry-approve", args=[enquiry.reference])
    # Every decision form posts to an address whose fragment is the Decide card: the browser
    # opens the answer there, whatever its status.
    assert f'action="{approve}#actions"' in page or "approve_revision" not in page
    reject = reverse("recovery:enquiry-reject", args=[enquiry.reference])
    Enquiry.objects.filter(pk=enquiry.pk).update(state="ready_for_review")
    page = client.get(reverse("recovery:review-item", args=[enquiry.reference])).content.decode()
    assert f'action="{approve}#actions"' in page and f'action="{reject}#actions"' in page
    Enquiry.objects.filter(pk=enquiry.pk).update(state="needs_information")

    refused = client.post(
        approve, {"reason": "looks right", "next": f"/console/review/{enquiry.reference}/"}
    )
    assert refused.status_code == 409
    html = refused.content.decode()
    assert _nav_current(html) == ["Review"]
    decide = html[html.index('id="actions"') :]
    alert = re.search(r'<div class="msg msg-error" role="alert" tabindex="-1" data-focus>', decide)
    assert alert, "the refusal is the Decide card's, focused"
    assert "is not possible now: the enquiry is needs information" in decide
    assert 'Your reason, to copy: <q class="kept">looks right</q>' in decide

    missing = client.post(approve, {"reason": "", "next": f"/console/review/{enquiry.reference}/"})
    assert missing.status_code == 422
    assert _nav_current(missing.content.decode()) == ["Review"]


def test_a_refused_action_on_the_item_page_keeps_the_enquiries_nav(story, client_for):
    enquiry = story.enquiry("needs_information")
    refused = client_for("reviewer").post(
        reverse("recovery:enquiry-approve", args=[enquiry.reference]), {"reason": "ok"}
    )
    assert refused.status_code == 409
    assert _nav_current(refused.content.decode()) == ["Enquiries"]


def test_next_waiting_skips_the_reviewers_own_edits(story, client_for, people):
    # Issue 27, defect 6: after each approve it opened the enquiry the reviewer had edited.
    me = people["reviewer"]
    decided = story.enquiry("ready_for_review", reference="ENQ-D1")
    mine = story.enquiry("ready_for_review", reference="ENQ-MINE")
    other = story.enquiry("ready_for_review", reference="ENQ-OTHER")
    now = timezone.now()
    Enquiry.objects.filter(pk=mine.pk).update(state_changed_at=now - timezone.timedelta(hours=2))
    Enquiry.objects.filter(pk=other.pk).update(state_changed_at=now - timezone.timedelta(hours=1))
    intake_services.revise_enquiry(
        mine.pk, actor=me, reason="fixed the phone", fields={"phone": "+44 7700 900001"}
    )
    client = client_for("reviewer")
    approved = client.post(
        reverse("recovery:enquiry-approve", args=[decided.reference]),
        {"reason": "checked", "next": f"/console/review/{decided.reference}/"},
    )
    assert approved.status_code == 302
    # ENQ-MINE waits longer, but this reviewer may not approve it.
    assert approved["Location"] == reverse("recovery:review-item", args=["ENQ-OTHER"]) + "#content"

    rejected = client.post(
        reverse("recovery:enquiry-reject", args=["ENQ-OTHER"]),
        {"reason": "spam", "resident_message": "Sorry.", "next": "/console/review/ENQ-OTHER/"},
    )
    assert rejected["Location"] == reverse("recovery:review") + "#content"
    listing = client.get(rejected["Location"]).content.decode()
    assert "The enquiries still waiting (1) are revisions you edited" in listing


def test_the_review_page_says_why_approve_is_not_offered_without_a_category(story, client_for):
    """An enquiry with no category: Approve is shown disabled with the CRM's need in the
    reviewer's words on the review and item pages; a POST anyway is refused, nothing changed."""
    from intake.models import EnquiryState
    from ledger.models import Operation

    words = "Choose a category before approving: the CRM needs one."
    enquiry = story.enquiry("ready_for_review", category=None)
    approve = reverse("recovery:enquiry-approve", args=[enquiry.reference])
    client = client_for("reviewer")
    for name in ("recovery:review-item", "recovery:enquiry"):
        page = client.get(reverse(name, args=[enquiry.reference])).content.decode()
        assert words in page, name
        assert f'action="{approve}' not in page, name
    answer = client.post(approve, {"reason": "looks right"})
    assert answer.status_code == 409
    assert words in answer.content.decode()
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.READY_FOR_REVIEW
    assert not Operation.objects.filter(enquiry=enquiry).exists()

    # Filed under a category, the same page offers Approve again.
    filed = story.enquiry("ready_for_review")
    page = client.get(reverse("recovery:review-item", args=[filed.reference])).content.decode()
    assert words not in page
    assert f'action="{reverse("recovery:enquiry-approve", args=[filed.reference])}' in page
