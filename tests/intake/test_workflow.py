"""The enquiry's state machine: only the diagram's arrows, only by those allowed, one journal row
for each."""

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django_fsm import TransitionNotAllowed
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from intake import services
from intake.models import Enquiry, EnquiryState
from ledger.models import JournalEntry
from tests.intake.factories import PATHS, EnquiryFactory

S = EnquiryState
DIAGRAM = Path(__file__).resolve().parents[2] / "docs" / "state-diagram.md"

# The lifecycle (docs/state-diagram.md, the enquiry's states), written out arrow by arrow. The
# diagram file is generated from the code; this is the independent statement of what the code
# must allow.
DESIGN_EDGES = {
    ("received", "validated"),
    ("validated", "ready_for_review"),
    ("validated", "needs_information"),
    ("validated", "rejected"),
    ("ready_for_review", "needs_information"),
    ("ready_for_review", "ready_for_review"),  # an edit: revision N+1
    ("ready_for_review", "approved"),
    ("ready_for_review", "rejected"),
    ("needs_information", "ready_for_review"),
    ("needs_information", "rejected"),
    ("approved", "ready_for_review"),  # edited after approval: renewed review
    # Its CRM write refused for data only the resident has: asked of them, the write cancelled.
    ("approved", "needs_information"),
    ("submitted", "needs_information"),
    ("approved", "submitted"),
    ("approved", "confirmed"),  # completed by hand
    ("approved", "rejected"),  # withdrawn before any write
    ("submitted", "confirmed"),
    ("submitted", "submission_unknown"),
    ("submitted", "approved"),  # known not written: waits again
    ("submission_unknown", "confirmed"),
    ("submission_unknown", "approved"),
    # Its waiting CRM write cancelled (a reviewer's decision): closed, never a dead end.
    ("submission_unknown", "rejected"),
}
TRANSITIONS = sorted(
    {t.name for t in Enquiry._meta.get_field("state").get_all_transitions(Enquiry)}
)


def diagram_edges(label="intake.Enquiry") -> set[tuple[str, str]]:
    text = DIAGRAM.read_text()
    section = text.split(f"## {label}", 1)[1].split("```", 2)[1]
    return set(re.findall(r"^\s+(\w+) --> (\w+) :", section, re.MULTILINE))


def code_edges() -> dict[str, set[str]]:
    """transition name -> the source states it accepts."""
    sources: dict[str, set[str]] = {}
    for t in Enquiry._meta.get_field("state").get_all_transitions(Enquiry):
        sources.setdefault(t.name, set()).add(str(t.source))
    return sources


def test_diagram_is_the_design():
    assert diagram_edges() == DESIGN_EDGES


@pytest.fixture
def people(make_user, db):
    def with_perms(username, *codenames, active=True):
        user = make_user(None, username=username, is_active=active)
        user.user_permissions.add(
            *Permission.objects.filter(content_type__app_label="intake", codename__in=codenames)
        )
        return type(user).objects.get(pk=user.pk)

    return {
        "reviewer": with_perms("rev-a", "review_enquiry", "approve_revision"),
        "reviewer_b": with_perms("rev-b", "review_enquiry", "approve_revision"),
        "coordinator": with_perms("coord", "complete_enquiry"),
        "admin": with_perms("adm", "review_enquiry", "approve_revision", "complete_enquiry"),
        "nobody": with_perms("nobody"),
        "inactive": with_perms(
            "gone", "review_enquiry", "approve_revision", "complete_enquiry", active=False
        ),
        "system": "system:test",
        "model": "model:test@1",
    }


ILLEGAL = [
    (state, name) for state in PATHS for name in TRANSITIONS if state not in code_edges()[name]
]


@pytest.mark.django_db
@pytest.mark.parametrize(("state", "name"), ILLEGAL)
def test_every_illegal_transition_is_refused(people, state, name):
    enquiry = EnquiryFactory(state=state)
    rows = JournalEntry.objects.filter(enquiry=enquiry).count()
    with pytest.raises(TransitionNotAllowed), transaction.atomic():
        getattr(enquiry, name)(actor=people["admin"], reason="test")
        enquiry.save()
    enquiry.refresh_from_db()
    assert enquiry.state == state
    assert JournalEntry.objects.filter(enquiry=enquiry).count() == rows


def test_illegal_list_covers_every_state_and_transition():
    assert {s for s, _ in ILLEGAL} == set(PATHS) == {str(s) for s in S}
    assert len(ILLEGAL) + sum(len(v) for v in code_edges().values()) == len(PATHS) * len(
        TRANSITIONS
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "name", "role"),
    [
        ("received", "validate", "admin"),  # people never validate
        ("validated", "mark_ready_for_review", "reviewer"),
        ("ready_for_review", "approve", "model"),
        ("ready_for_review", "approve", "system"),
        ("ready_for_review", "approve", "coordinator"),
        ("ready_for_review", "approve", "inactive"),
        ("ready_for_review", "reject", "nobody"),
        ("validated", "request_information", "model"),
        ("approved", "submit", "admin"),
        ("approved", "withdraw", "coordinator"),  # ending an enquiry is a reviewer's call
        ("submitted", "confirm", "model"),
        ("approved", "revise", "system"),
    ],
)
def test_wrong_actor_is_refused(people, state, name, role):
    enquiry = EnquiryFactory(state=state)
    with pytest.raises(PermissionDenied), transaction.atomic():
        getattr(enquiry, name)(actor=people[role], reason="test")
        enquiry.save()
    enquiry.refresh_from_db()
    assert enquiry.state == state


@pytest.mark.django_db
def test_a_reviewer_may_not_approve_their_own_edit(people):
    enquiry = EnquiryFactory(state="ready_for_review")
    services.revise_enquiry(
        enquiry.pk, actor=people["reviewer"], reason="fix phone", fields={"phone": "07700 900999"}
    )
    enquiry.refresh_from_db()
    with pytest.raises(PermissionDenied, match="edited themselves"), transaction.atomic():
        enquiry.approve(actor=people["reviewer"], reason="looks right")
        enquiry.save()
    with transaction.atomic():
        enquiry.approve(actor=people["reviewer_b"], reason="looks right")
        enquiry.save()
    revision = enquiry.revision
    assert (enquiry.state, enquiry.approved_revision) == ("approved", 2)
    assert revision.approved_by == people["reviewer_b"]
    assert revision.approved_at is not None


@pytest.mark.django_db
def test_factory_reaches_every_state_by_transitions():
    for state in PATHS:
        enquiry = EnquiryFactory(state=state)
        assert enquiry.state == state
        rows = list(
            JournalEntry.objects.filter(subject_type="intake.enquiry", enquiry=enquiry).order_by(
                "at", "id"
            )
        )
        assert len(rows) == len(PATHS[state])
        assert all((r.from_state, r.to_state) in DESIGN_EDGES for r in rows)


# --- random actions by random roles -----------------------------------------------------------

ROLES = ["reviewer", "reviewer_b", "coordinator", "admin", "nobody", "inactive", "system", "model"]
REFUSALS = (TransitionNotAllowed, PermissionDenied, services.ActionRefused)


class EnquiryMachine(RuleBasedStateMachine):
    people: dict = {}

    def __init__(self):
        super().__init__()
        self.enquiry = EnquiryFactory(state="received")
        self.transitions = 0

    def _state(self):
        return Enquiry.objects.get(pk=self.enquiry.pk).state

    def _attempt(self, call, transitions_if_done=1):
        before = self._state()
        try:
            with transaction.atomic():
                call()
        except REFUSALS:
            assert self._state() == before
            return
        after = self._state()
        assert (before, after) in DESIGN_EDGES or (before == after and transitions_if_done == 0)
        self.transitions += transitions_if_done

    @rule(name=st.sampled_from(TRANSITIONS), role=st.sampled_from(ROLES))
    def fire(self, name, role):
        def call():
            enquiry = Enquiry.objects.select_for_update().get(pk=self.enquiry.pk)
            getattr(enquiry, name)(actor=self.people[role], reason="random")
            enquiry.save()

        self._attempt(call)

    @rule(role=st.sampled_from(ROLES), phone=st.sampled_from(["07700 900001", "07700 900002"]))
    def edit(self, role, phone):
        self._attempt(
            lambda: services.revise_enquiry(
                self.enquiry.pk, actor=self.people[role], reason="edit", fields={"phone": phone}
            )
        )

    @rule(
        action=st.sampled_from(["request_information", "information_received", "reject_enquiry"]),
        role=st.sampled_from(ROLES),
    )
    def service(self, action, role):
        self._attempt(
            lambda: getattr(services, action)(self.enquiry.pk, actor=self.people[role], reason="r")
        )

    @rule()
    def suggest(self):
        validated = self._state() == S.VALIDATED
        self._attempt(
            lambda: services.suggest_category(self.enquiry, force=True),
            transitions_if_done=1 if validated else 0,
        )

    @invariant()
    def one_journal_row_per_transition_along_the_diagram(self):
        rows = list(
            JournalEntry.objects.filter(
                subject_type="intake.enquiry", subject_id=str(self.enquiry.pk)
            )
            # The ledger's note that the resident was not told (no message written here) is
            # about the enquiry but is no transition.
            .exclude(action="ledger.resident_message.not_sent")
            .order_by("at", "id")
        )
        assert len(rows) == self.transitions
        previous = "received"
        for row in rows:
            assert row.from_state == previous
            assert (row.from_state, row.to_state) in DESIGN_EDGES
            previous = row.to_state
        assert previous == self._state()
        for row in rows:
            if row.action == "intake.enquiry.approve":
                # Approved only by an active person with the permission, never a model.
                assert row.actor_user is not None and row.actor_user.is_active
                assert row.actor_user.has_perm("intake.approve_revision")


@pytest.mark.django_db
def test_random_actions_by_random_roles_stay_on_the_diagram(people, demo_categories):
    EnquiryMachine.people = people
    run_state_machine_as_test(
        EnquiryMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
