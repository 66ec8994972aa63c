"""The review page's offer: "This may be a reply to ENQ-…: attach it", one click with a
reason (intake.quoted)."""

import pytest

from intake.models import Enquiry, EnquiryState
from ledger.models import JournalEntry
from tests.intake.factories import EnquiryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def pair():
    first = EnquiryFactory(state="needs_information", email="ana@example.org")
    second = EnquiryFactory(
        state="ready_for_review",
        email="ana@example.org",
        message=f"About {first.reference.lower()}: the bin is outside number 14.",
    )
    return first, second


def test_the_review_page_offers_it_and_one_click_attaches_it(pair, client_for):
    first, second = pair
    client = client_for("reviewer")
    page = client.get(f"/console/review/{second.reference}/").content.decode()
    assert "This may be a reply to" in page and first.reference in page
    enquiries = Enquiry.objects.count()
    response = client.post(
        f"/console/review/{second.reference}/attach-as-reply/",
        {"target": first.reference, "reason": "same bin, she quotes the reference"},
    )
    assert response.status_code == 302
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.current_revision == 2 and first.state == EnquiryState.READY_FOR_REVIEW
    assert "outside number 14" in first.revision.fields["message"]
    assert second.state == EnquiryState.REJECTED
    assert Enquiry.objects.count() == enquiries
    closed = JournalEntry.objects.get(enquiry_id=second.pk, action="intake.enquiry.reject")
    assert closed.evidence["attached_to"] == first.reference
    assert closed.actor == "user:the-reviewer"
    assert JournalEntry.objects.filter(
        enquiry_id=first.pk, action="intake.enquiry.resident_answered", actor="user:the-reviewer"
    ).exists()


def test_attaching_needs_a_reason(pair, client_for):
    first, second = pair
    response = client_for("reviewer").post(
        f"/console/review/{second.reference}/attach-as-reply/",
        {"target": first.reference, "reason": ""},
    )
    assert response.status_code == 422
    second.refresh_from_db()
    assert second.state == EnquiryState.READY_FOR_REVIEW
