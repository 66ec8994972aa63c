"""intake.documents: a reviewer's correction of a field read from a document is journalled with
its reason, kept apart from what was read, and makes a new revision (what is sent changes)."""

import pytest
from django.core.exceptions import PermissionDenied

from intake.documents import correct_document_field
from intake.models import Document
from intake.services import ActionRefused
from ledger.models import JournalEntry
from tests.intake.factories import EnquiryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewer(make_user):
    return make_user("reviewer")


@pytest.fixture
def read_form():
    def make(state="ready_for_review", **fields):
        enquiry = EnquiryFactory(state=state)
        return Document.objects.create(
            enquiry=enquiry,
            document_id="permit-17.pdf",
            version="1001-1700000000-952",
            status="extracted",
            extracted=fields or {"permit": "P-17", "ward": "Nrth"},
        )

    return make


def test_a_correction_wins_is_journalled_and_makes_a_new_revision(reviewer, read_form):
    document = read_form()
    correct_document_field(
        document.pk, actor=reviewer, reason="form says North", field="ward", value=" North "
    )
    document.refresh_from_db()
    enquiry = document.enquiry
    enquiry.refresh_from_db()
    assert document.extracted == {"permit": "P-17", "ward": "Nrth"}  # what was read, kept
    assert document.corrected == {"ward": "North"}
    assert document.fields == {"permit": "P-17", "ward": "North"}
    assert document.corrected_by == reviewer
    assert enquiry.current_revision == 2
    assert (
        enquiry.revisions.get(number=2).note == "corrected ward of permit-17.pdf: form says North"
    )
    row = JournalEntry.objects.get(action="intake.document.corrected")
    assert (row.actor_user, row.reason) == (reviewer, "form says North")
    assert row.evidence == {
        "document": "permit-17.pdf",
        "version": "1001-1700000000-952",
        "field": "ward",
        "revision": 2,
        "corrected_before": False,
    }
    assert "North" not in str(row.evidence)  # names, never values: the journal outlives them


def test_an_approved_enquiry_needs_approving_again_after_a_correction(reviewer, read_form):
    document = read_form(state="approved")
    correct_document_field(document.pk, actor=reviewer, reason="typo", field="ward", value="N")
    document.enquiry.refresh_from_db()
    assert document.enquiry.state == "ready_for_review"
    assert document.enquiry.approved_revision is None


@pytest.mark.parametrize(
    "field, value, refusal",
    [
        ("ward", "Nrth", "nothing to correct"),
        ("owner", "x", "no field 'owner'"),
        ("ward", "x" * 2001, "within 2000"),
    ],
)
def test_a_correction_that_changes_nothing_or_names_no_field_is_refused(
    reviewer, read_form, field, value, refusal
):
    document = read_form()
    with pytest.raises(ActionRefused, match=refusal):
        correct_document_field(document.pk, actor=reviewer, reason="r", field=field, value=value)
    document.refresh_from_db()
    assert document.corrected == {} and document.enquiry.current_revision == 1
    assert not JournalEntry.objects.filter(action="intake.document.corrected").exists()


def test_once_sent_the_fields_can_no_longer_be_corrected(reviewer, read_form):
    document = read_form(state="submitted")
    with pytest.raises(ActionRefused, match="can no longer be corrected"):
        correct_document_field(document.pk, actor=reviewer, reason="r", field="ward", value="N")
    document.refresh_from_db()
    assert document.corrected == {}


def test_a_reason_and_the_review_permission_are_required(reviewer, read_form, make_user):
    document = read_form()
    with pytest.raises(ActionRefused, match="reason"):
        correct_document_field(document.pk, actor=reviewer, reason=" ", field="ward", value="N")
    with pytest.raises(PermissionDenied):
        correct_document_field(
            document.pk, actor=make_user("coordinator"), reason="r", field="ward", value="N"
        )
