import pytest
from django.core.exceptions import PermissionDenied

from intake import services, signals
from intake.models import Enquiry, Revision
from ledger.models import JournalEntry
from tests.intake.factories import CategoryFactory, EnquiryFactory, factory_reviewer

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewer(make_user):
    return make_user("reviewer")


@pytest.fixture
def revisions_sent():
    caught = []

    def receiver(sender, **kwargs):
        caught.append(kwargs)

    signals.revision_created.connect(receiver, weak=False)
    yield caught
    signals.revision_created.disconnect(receiver)


def enquiry_journal(enquiry):
    return list(
        JournalEntry.objects.filter(subject_type="intake.enquiry", enquiry=enquiry).order_by(
            "at", "id"
        )
    )


def test_editing_an_approved_enquiry_makes_revision_n_plus_1_and_renews_review(
    reviewer, revisions_sent
):
    waste = CategoryFactory(slug="waste")
    enquiry = EnquiryFactory(state="approved", message="My bin was not emptied.")
    assert enquiry.approved_revision == 1

    revision = services.revise_enquiry(
        enquiry.pk,
        actor=reviewer,
        reason="customer gave a new phone number",
        fields={"phone": "07700 900456"},
        category="waste",
    )

    enquiry.refresh_from_db()
    assert revision.number == 2
    assert enquiry.current_revision == 2
    assert enquiry.state == "ready_for_review"
    assert enquiry.approved_revision is None  # the approval of r1 does not carry over
    assert enquiry.category == waste
    assert revision.fields["phone"] == "07700 900456"
    assert revision.fields["category"] == "waste"
    assert revision.fields["message"] == "My bin was not emptied."
    assert revision.created_by == reviewer
    assert revision.origin == "reviewer"
    first = Revision.objects.get(enquiry=enquiry, number=1)
    assert first.fields["phone"] == "" and first.approved_by is not None  # history kept
    assert enquiry.message == "My bin was not emptied."  # the original, untouched
    last = enquiry_journal(enquiry)[-1]
    assert (last.from_state, last.to_state, last.action) == (
        "approved",
        "ready_for_review",
        "intake.enquiry.revise",
    )
    assert last.reason == "customer gave a new phone number"
    assert last.evidence["changed"] == ["category", "phone"]
    assert revisions_sent[-1]["revision"] == revision
    assert revisions_sent[-1]["previous_revision"] == 1


def test_revision_keeps_category_when_none_given(reviewer):
    category = CategoryFactory()
    enquiry = EnquiryFactory(state="ready_for_review")
    services.revise_enquiry(enquiry.pk, actor=reviewer, reason="r", fields={}, category=category)
    again = services.revise_enquiry(enquiry.pk, actor=reviewer, reason="r", fields={"name": "X"})
    assert again.category == category
    assert again.number == 3


def test_original_message_is_never_overwritten(reviewer):
    enquiry = EnquiryFactory(message="Original words")
    services.revise_enquiry(
        enquiry.pk, actor=reviewer, reason="tidy", fields={"message": "Tidied words"}
    )
    enquiry = Enquiry.objects.get(pk=enquiry.pk)
    assert enquiry.message == "Original words"
    assert enquiry.revision.fields["message"] == "Tidied words"
    enquiry.message = "Rewritten"
    with pytest.raises(ValueError, match="never overwritten"):
        enquiry.save()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fields": {"reference": "X"}}, "cannot be edited"),
        ({"fields": {}, "category": "nope"}, "no category"),
        ({"fields": {}, "reason": ""}, "Give a reason"),
    ],
)
def test_revise_refusals(reviewer, kwargs, message):
    enquiry = EnquiryFactory(state="ready_for_review")
    kwargs = {"reason": "r", **kwargs}
    with pytest.raises(services.ActionRefused, match=message):
        services.revise_enquiry(enquiry.pk, actor=reviewer, **kwargs)
    assert enquiry.revisions.count() == 1


def test_revise_refuses_a_retired_category(reviewer):
    CategoryFactory(slug="parking", retired=True)
    enquiry = EnquiryFactory(state="ready_for_review")
    with pytest.raises(services.ActionRefused, match="retired"):
        services.revise_enquiry(
            enquiry.pk, actor=reviewer, reason="r", fields={}, category="parking"
        )


@pytest.mark.parametrize("state", ["submitted", "submission_unknown", "confirmed", "rejected"])
def test_revise_is_refused_once_delivery_started_or_closed(reviewer, state):
    enquiry = EnquiryFactory(state=state)
    with pytest.raises(services.ActionRefused, match="no longer be edited"):
        services.revise_enquiry(enquiry.pk, actor=reviewer, reason="r", fields={"name": "X"})
    assert enquiry.revisions.count() == 1


def test_revise_by_a_person_without_permission_is_denied(make_user):
    enquiry = EnquiryFactory(state="ready_for_review")
    with pytest.raises(PermissionDenied):
        services.revise_enquiry(
            enquiry.pk, actor=make_user("coordinator"), reason="r", fields={"name": "X"}
        )
    assert enquiry.revisions.count() == 1


def test_request_information_then_received(reviewer):
    enquiry = EnquiryFactory(state="ready_for_review")
    services.request_information(
        enquiry.pk, actor=reviewer, reason="which address?", resident_message="Your address?"
    )
    assert Enquiry.objects.get(pk=enquiry.pk).state == "needs_information"
    services.information_received(enquiry.pk, actor="system:mailbox", reason="customer replied")
    assert Enquiry.objects.get(pk=enquiry.pk).state == "ready_for_review"
    actions = [row.action for row in enquiry_journal(enquiry)][-2:]
    assert actions == ["intake.enquiry.request_information", "intake.enquiry.information_received"]


def test_reject_closes_and_then_refuses_everything(reviewer):
    enquiry = EnquiryFactory(state="validated")
    services.reject_enquiry(enquiry.pk, actor=reviewer, reason="spam", resident_message="Sorry.")
    enquiry.refresh_from_db()
    assert enquiry.state == "rejected" and enquiry.closed_at is not None
    with pytest.raises(services.ActionRefused, match="cannot request information"):
        services.request_information(enquiry.pk, actor=reviewer, reason="r")


def test_a_person_must_give_a_reason(reviewer):
    enquiry = EnquiryFactory(state="validated")
    with pytest.raises(services.ActionRefused, match="reason"):
        services.reject_enquiry(enquiry.pk, actor=reviewer, reason="  ")
    assert Enquiry.objects.get(pk=enquiry.pk).state == "validated"


def test_assign_sets_owner_and_tells_the_journal(reviewer, make_user):
    caught = []

    def receiver(sender, **kwargs):
        caught.append(kwargs)

    signals.enquiry_action.connect(receiver, weak=False)
    owner = make_user("coordinator")
    enquiry = EnquiryFactory()
    try:
        services.assign_enquiry(enquiry.pk, actor=reviewer, reason="my patch", owner=owner)
    finally:
        signals.enquiry_action.disconnect(receiver)
    enquiry.refresh_from_db()
    assert enquiry.owner == owner
    assert caught[-1]["action"] == "intake.enquiry.assigned"
    assert caught[-1]["evidence"]["to"] == owner.username


def test_assign_refuses_people_without_a_role_and_inactive_owners(make_user, reviewer):
    enquiry = EnquiryFactory()
    with pytest.raises(PermissionDenied):
        services.assign_enquiry(enquiry.pk, actor=make_user(None), reason="r", owner=reviewer)
    with pytest.raises(PermissionDenied):
        services.assign_enquiry(enquiry.pk, actor="model:x@1", reason="r", owner=reviewer)
    gone = make_user("coordinator", is_active=False)
    with pytest.raises(services.ActionRefused, match="not an active user"):
        services.assign_enquiry(enquiry.pk, actor=reviewer, reason="r", owner=gone)
    assert Enquiry.objects.get(pk=enquiry.pk).owner is None


def test_customer_matches_are_earlier_same_email_only():
    first = EnquiryFactory(email="sam@example.org")
    other = EnquiryFactory(email="someone@example.org")
    second = EnquiryFactory(email="sam@example.org")
    later = EnquiryFactory(email="sam@example.org")
    assert list(services.customer_matches(second)) == [first]
    assert list(services.customer_matches(later)) == [second, first]
    assert list(services.customer_matches(other)) == []
    assert list(services.customer_matches(EnquiryFactory(email="", phone="07700900123"))) == []


def test_factory_reviewer_is_allowed_everything_it_needs():
    user = factory_reviewer()
    for perm in ("review_enquiry", "approve_revision", "complete_enquiry"):
        assert user.has_perm(f"intake.{perm}")


# --- what intake's action skeleton shares with the ledger's (this module's docstring) -----------


def _an_action_on_each_side(make_user):
    """(intake's reject on an enquiry, the ledger's cancel on an operation), each taken by a
    person who may, with a given reason."""
    from ledger import services as ledger_services
    from tests.ledger.factories import make_operation

    enquiry = EnquiryFactory(state="validated")
    op = make_operation(EnquiryFactory(state="confirmed"), "failed", action="notify.send")
    reviewer, coordinator = make_user("reviewer"), make_user("coordinator")

    def reject(reason):
        return services.reject_enquiry(
            enquiry.pk, actor=reviewer, reason=reason, resident_message="We will not go on."
        )

    def cancel(reason):
        return ledger_services.cancel_operation(op.pk, actor=coordinator, reason=reason)

    return (enquiry, reject, reviewer), (op, cancel, coordinator)


def test_intake_and_the_ledger_refuse_a_missing_reason_the_same_way(make_user):
    from intake.workflow import REASON_REQUIRED
    from ledger.services import ActionRefused as LedgerActionRefused

    assert LedgerActionRefused is services.ActionRefused  # one refusal
    sides = _an_action_on_each_side(make_user)
    before = JournalEntry.objects.count()
    for subject, act, _ in sides:
        with pytest.raises(services.ActionRefused) as refused:
            act(" \u200b ")  # no visible text
        assert str(refused.value) == str(REASON_REQUIRED)
        state = subject.state
        subject.refresh_from_db()
        assert subject.state == state
    assert JournalEntry.objects.count() == before


def test_intake_and_the_ledger_journal_a_persons_action_the_same_way(make_user):
    """One row for the transition, written by its signal (ledger.journal), as the person, with
    their reason (kept apart, where the purge can erase it)."""
    for subject, act, person in _an_action_on_each_side(make_user):
        before = JournalEntry.objects.order_by("-pk").values_list("pk", flat=True).first()
        act("the customer withdrew")
        rows = JournalEntry.objects.filter(pk__gt=before, subject_id=str(subject.pk))
        (row,) = rows.exclude(action__endswith="_changed")
        assert (row.actor, row.actor_user, row.reason) == (
            f"user:{person.get_username()}",
            person,
            "the customer withdrew",
        )
        assert row.action.endswith(".reject") or row.action.endswith(".cancel")
