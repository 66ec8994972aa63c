"""ledger.policies: which policy an action has, its retry budget, and what a person may do
next from each state, never a blind repeat of an uncertain write."""

import pytest

from ledger import policies
from ledger.models import Integration, Operation, OperationState
from ledger.policies import APPROVE, CANCEL, COMPLETE, REASSIGN, RECONCILE, RETRY

WRITE = "crm.create_enquiry"
READ = "documents.extract"


def op(action=WRITE, state=OperationState.UNKNOWN, attention="", integration=None):
    return Operation(action=action, state=state, attention=attention, integration=integration)


def test_every_action_has_one_policy_and_an_unknown_action_has_none():
    assert policies.policy_for(op(WRITE)) is policies.POLICIES[WRITE]
    assert policies.policy_for(WRITE).is_write
    assert not policies.policy_for(READ).is_write
    with pytest.raises(KeyError, match=r"no policy for action 'crm\.delete_everything'"):
        policies.policy_for("crm.delete_everything")


def test_the_retry_budget_is_the_integrations_with_a_floor_and_the_policys_without_one():
    suggestion = policies.POLICIES["suggest.category"]
    assert policies.retry_budget(op("suggest.category", integration=None)) == (
        suggestion.default_retry_budget,
        suggestion.default_backoff_seconds,
    )
    generous = Integration(name="crm", retry_budget=7, backoff_seconds=2.5)
    assert policies.retry_budget(op(integration=generous)) == (7, 2.5)
    # A misconfigured row still allows the first attempt and never waits a negative time.
    broken = Integration(name="crm", retry_budget=0, backoff_seconds=-3)
    assert policies.retry_budget(op(integration=broken)) == (1, 0.0)


@pytest.mark.parametrize(
    ("action", "state", "attention", "expected"),
    [
        # A revision's write is approved with its revision, never on its own (issue 19, 1).
        (WRITE, OperationState.PROPOSED, "", [REASSIGN]),
        ("crm.close_enquiry", OperationState.PROPOSED, "", [APPROVE, CANCEL, REASSIGN]),
        (WRITE, OperationState.APPROVED, "", [CANCEL, REASSIGN]),
        # An uncertain write: look it up or complete it; no retry while duplicates may exist.
        (WRITE, OperationState.UNKNOWN, "", [RECONCILE, COMPLETE, REASSIGN]),
        (WRITE, OperationState.UNKNOWN, "duplicate_records", [RECONCILE, COMPLETE, REASSIGN]),
        # The destination could not be asked: a person's informed retry is offered.
        (
            WRITE,
            OperationState.UNKNOWN,
            "lookup_unavailable",
            [RECONCILE, COMPLETE, RETRY, REASSIGN],
        ),
        (WRITE, OperationState.UNKNOWN, "lookup_failed", [RECONCILE, COMPLETE, RETRY, REASSIGN]),
        (
            READ,
            OperationState.UNKNOWN,
            "",
            [RECONCILE, COMPLETE, RETRY, REASSIGN],
        ),  # a read repeats safely
        (WRITE, OperationState.FAILED, "invalid", [RETRY, COMPLETE, CANCEL, REASSIGN]),
        (WRITE, OperationState.FAILED, "duplicate_records", [COMPLETE, CANCEL, REASSIGN]),
        (WRITE, OperationState.CANCELLED, "", []),
    ],
)
def test_what_each_state_allows(action, state, attention, expected):
    assert policies.state_allows(op(action, state, attention)) == expected


def test_a_person_is_offered_only_what_their_permissions_allow(make_user):
    unknown = op(WRITE, OperationState.UNKNOWN, "lookup_unavailable")
    admin, coordinator, reviewer = (
        make_user("admin"),
        make_user("coordinator"),
        make_user("reviewer"),
    )
    assert policies.allowed_actions(unknown, admin) == [RECONCILE, COMPLETE, RETRY, REASSIGN]
    # Retry needs ledger.recover_operation, which a coordinator does not have by default.
    assert policies.allowed_actions(unknown, coordinator) == [RECONCILE, COMPLETE, REASSIGN]
    assert policies.allowed_actions(unknown, reviewer) == []
    proposed = op(WRITE, OperationState.PROPOSED)  # waits for its revision's approval
    assert policies.allowed_actions(proposed, reviewer) == []
    assert policies.allowed_actions(proposed, coordinator) == [REASSIGN]
    # A compensation is approved on its own, by those who may change an external system.
    close = op("crm.close_enquiry", OperationState.PROPOSED)
    assert policies.allowed_actions(close, admin) == [APPROVE, CANCEL, REASSIGN]
    assert policies.allowed_actions(close, reviewer) == []


def test_e_mail_is_retried_for_its_window_and_other_kinds_by_their_budget(settings):
    settings.EMAIL_RETRY_FIRST_SECONDS = 60.0
    settings.EMAIL_RETRY_MAX_SECONDS = 3600.0
    settings.EMAIL_RETRY_HOURS = 24.0
    mail = policies.retry_schedule(
        op("notify.send", integration=Integration(name="notify", kind="smtp"))
    )
    assert (mail.window, mail.attempts) == (24 * 3600.0, None)
    assert [mail.delay(n) for n in range(1, 10)] == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]
    assert mail.delay(10_000) == 3600  # no overflow however long it runs
    crm = policies.retry_schedule(
        op(integration=Integration(name="crm", retry_budget=4, backoff_seconds=2))
    )
    assert (crm.window, crm.attempts, [crm.delay(n) for n in (1, 2, 3)]) == (None, 4, [2, 4, 8])
