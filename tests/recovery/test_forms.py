"""recovery.forms: every operator action needs a reason; each form takes only what it offers."""

import pytest

from intake.models import Category
from ledger.models import Operation
from recovery.forms import CompleteByHandForm, EditForm, ReasonForm, ReassignForm, ReleaseForm


@pytest.mark.parametrize("reason", ["", "   \n "])
def test_a_blank_reason_is_refused_in_the_operators_words(reason):
    form = ReasonForm({"reason": reason})
    assert not form.is_valid()
    assert form.errors["reason"] == ["Give a reason: it is written to the journal."]


def test_a_reason_is_kept_stripped_and_bounded():
    form = ReasonForm({"reason": "  checked with the caller \n"})
    assert form.is_valid()
    assert form.cleaned_data["reason"] == "checked with the caller"
    assert not ReasonForm({"reason": "x" * 2001}).is_valid()


def test_completing_by_hand_needs_the_destinations_reference():
    form = CompleteByHandForm({"reason": "found it", "external_id": " "})
    assert not form.is_valid()
    assert form.errors["external_id"] == ["Give the record's reference at the destination."]
    form = CompleteByHandForm({"reason": "found it", "external_id": " CRM-9 "})
    assert form.is_valid() and form.cleaned_data["external_id"] == "CRM-9"


def test_reassign_offers_only_active_people_with_a_role(db, make_user, django_user_model):
    coordinator = make_user("coordinator", username="cora")
    make_user("reviewer", username="gone", is_active=False)
    django_user_model.objects.create_user("no-role", password="x")
    form = ReassignForm()
    assert list(form.fields["owner"].queryset) == [coordinator]
    assert ReassignForm({"reason": "holiday", "owner": ""}).is_valid()  # nobody
    stranger = django_user_model.objects.get(username="no-role")
    assert not ReassignForm({"reason": "holiday", "owner": stranger.pk}).is_valid()


def test_an_edit_sends_only_the_fields_sent_and_changed(db):
    class Revision:
        fields = {"subject": "Bin", "email": "a@example.org", "phone": ""}

    Category.objects.create(slug="noise", name="Noise", active=True)
    Category.objects.create(slug="old", name="Old", active=False)
    form = EditForm(
        {"reason": "typo", "subject": "Bin", "email": "b@example.org", "phone": ""},
        revision=Revision(),
    )
    assert form.is_valid(), form.errors
    assert form.changed_fields() == {"email": "b@example.org"}
    assert list(form.fields["category"].queryset.values_list("slug", flat=True)) == ["noise"]
    unbound = EditForm(revision=Revision())
    assert unbound.fields["subject"].initial == "Bin"
    assert not EditForm({"reason": "r", "category": "old"}, revision=Revision()).is_valid()


def test_release_takes_only_operations_of_the_backlog_shown():
    held = [Operation(), Operation()]
    form = ReleaseForm({"reason": "back up", "operations": [str(held[0].pk)]}, backlog=held)
    assert form.is_valid() and form.cleaned_data["operations"] == [str(held[0].pk)]
    elsewhere = Operation()
    form = ReleaseForm({"reason": "back up", "operations": [str(elsewhere.pk)]}, backlog=held)
    assert not form.is_valid()


# Django's address rule allows these inside quotes; Python's e-mail headers take \x0b, \x0c and
# \x1c-\x1e as line breaks (str.splitlines).
@pytest.mark.parametrize(
    "email", ['"a\x0bb"@example.org', '"a\x0cb"@example.org', '"a\x1cb"@example.org']
)
def test_an_edit_refuses_a_control_character_in_a_quoted_address(db, email):
    form = EditForm({"reason": "typo", "email": email})
    assert not form.is_valid()
    assert "control character" in form.errors["email"][0]
