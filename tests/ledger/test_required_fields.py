"""A kind declares the fields its destination requires (ledger.kinds.Kind.requires): an
enquiry without a category is not approved, in the reviewer's words, and nothing is proposed,
queued or sent; with its category it is approved and reaches the CRM filed under it."""

import pytest
from django_q.models import OrmQ

from intake.models import Category, EnquiryState, Revision
from ledger import services
from ledger.kinds import KINDS
from ledger.models import Action, JournalEntry, Operation
from tests.ledger.conftest import crm_records, run_due_tasks

WORDS = "Choose a category before approving: the CRM needs one."


@pytest.mark.parametrize("kind", ["handover", "bottlecrm"])
def test_both_crm_kinds_require_a_category(kind):
    create = Action.CREATE_ENQUIRY
    assert KINDS[kind].missing(create, {"reference": "ENQ-1", "category": None}) == ["category"]
    assert KINDS[kind].missing(create, {"reference": "ENQ-1", "category": "waste"}) == []


def test_an_enquiry_without_a_category_is_not_approved_and_nothing_reaches_the_crm(
    make_enquiry, reviewer, integrations, sandbox
):
    enquiry = make_enquiry(category=None)
    journal = JournalEntry.objects.count()
    queued = OrmQ.objects.count()
    with pytest.raises(services.ActionRefused) as refused:
        services.approve_revision(enquiry.pk, actor=reviewer, reason="looks right")
    assert str(refused.value) == WORDS
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.READY_FOR_REVIEW
    assert not Operation.objects.filter(enquiry=enquiry, action=Action.CREATE_ENQUIRY).exists()
    assert JournalEntry.objects.count() == journal and OrmQ.objects.count() == queued
    run_due_tasks()
    assert crm_records(sandbox, enquiry.reference) == 0

    # A reviewer's revision with a category: approved, and the CRM's record is filed under it.
    category = Category.objects.create(slug="housing-repairs", name="Housing repairs")
    Revision.objects.create(
        enquiry=enquiry, number=2, category=category, fields=enquiry.revision.fields
    )
    enquiry.current_revision = 2
    enquiry.save(update_fields=["current_revision"])
    op = services.approve_revision(enquiry.pk, actor=reviewer, reason="filed under repairs")
    assert op.payload["category"] == "housing-repairs"
    run_due_tasks()
    assert crm_records(sandbox, enquiry.reference) == 1
