"""A new enquiry from the same address quoting an open enquiry's reference: offered to the
reviewer as a reply (never silently a duplicate, never silently merged); attached with one
click and a reason, it is a revision of the open one and the new one is closed (rejected)."""

import pytest

from intake import quoted
from intake.workflow import ActionRefused
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


def test_a_quoting_enquiry_from_the_same_address_is_offered_as_a_reply(pair):
    first, second = pair
    assert quoted.quoted_open_enquiry(second) == first


@pytest.mark.parametrize(
    "change",
    [
        {"email": "someone-else@example.org"},
        {"message": "No reference here."},
    ],
)
def test_no_offer_without_the_same_address_and_the_reference(pair, change):
    first, _ = pair
    other = EnquiryFactory(
        state="ready_for_review",
        **{"email": "ana@example.org", "message": f"re {first.reference}", **change},
    )
    assert quoted.quoted_open_enquiry(other) is None


def test_no_offer_when_the_quoted_enquiry_was_passed_on():
    first = EnquiryFactory(state="approved", email="ana@example.org")
    second = EnquiryFactory(email="ana@example.org", message=f"re {first.reference}")
    assert quoted.quoted_open_enquiry(second) is None


def test_an_enquiry_it_does_not_quote_cannot_be_chosen(pair, make_user):
    _first, second = pair
    elsewhere = EnquiryFactory(state="needs_information", email="ana@example.org")
    with pytest.raises(ActionRefused):
        quoted.attach_as_reply(
            second.pk,
            target_reference=elsewhere.reference,
            actor=make_user("reviewer"),
            reason="guess",
        )
    elsewhere.refresh_from_db()
    assert elsewhere.current_revision == 1
