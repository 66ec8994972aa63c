"""recovery.permissions: what the console offers a person on an item (state + permission)."""

import pytest

from ledger.models import Integration, Operation, OperationState
from recovery import permissions


def test_an_operation_offers_what_the_policy_and_the_permission_allow(people):
    unknown = Operation(action="crm.create_enquiry", state=OperationState.UNKNOWN)
    assert permissions.operation_actions(unknown, people["admin"]) == [
        "reconcile",
        "complete_by_hand",
        "reassign",
    ]
    assert permissions.operation_actions(unknown, people["reviewer"]) == []


def test_an_operation_with_no_policy_offers_nothing_rather_than_guess(people):
    stray = Operation(action="crm.delete_everything", state=OperationState.FAILED)
    assert permissions.operation_actions(stray, people["admin"]) == []


def test_an_enquiry_offers_its_available_transitions_the_person_may_fire(story, people):
    ready = story.enquiry("ready_for_review")
    assert permissions.enquiry_actions(ready, people["reviewer"]) == [
        "approve_revision",
        "edit",
        "request_information",
        "reject",
        "assign",
    ]
    # A coordinator reviews nothing, but may take it on.
    assert permissions.enquiry_actions(ready, people["coordinator"]) == ["assign"]
    waiting = story.enquiry("needs_information")
    assert permissions.enquiry_actions(waiting, people["reviewer"]) == [
        "edit",
        "information_received",
        "reject",
        "assign",
    ]


def test_a_closed_enquiry_offers_nothing(story, people):
    rejected = story.enquiry("rejected")
    assert rejected.closed_at is not None
    assert permissions.enquiry_actions(rejected, people["admin"]) == []


@pytest.mark.parametrize(
    ("paused", "awaiting", "expected"),
    [(False, False, ["pause"]), (True, False, ["resume"]), (False, True, ["release"])],
)
def test_an_integration_offers_the_one_next_step(people, paused, awaiting, expected):
    integration = Integration(name="crm", paused=paused, awaiting_backlog_review=awaiting)
    assert permissions.integration_actions(integration, people["admin"]) == expected
    assert permissions.integration_actions(integration, people["coordinator"]) == []


def test_a_message_to_an_operator_is_not_reassigned(people):
    # It belongs to no enquiry and to nobody's queue: retried, completed or cancelled.
    message = Operation(action="notify.send", state=OperationState.FAILED, enquiry=None)
    assert "reassign" not in permissions.operation_actions(message, people["admin"])
    assert "cancel" in permissions.operation_actions(message, people["admin"])
