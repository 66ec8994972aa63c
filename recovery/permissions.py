"""Which console actions a person may take on an item: state + policy + permission.

Operations ask the ledger's policy table (ledger.policies.allowed_actions). Enquiries ask their
own state machine: the transitions available from the current state, filtered by the
transition's permission. None of this queries the database once the user's permissions are
loaded (Django caches them on the user), so the queue can ask for every row.
"""

from intake.models import EnquiryState
from ledger import policies
from ledger.models import Action, Integration
from ledger.services import refused_write
from recovery.operator_actions import ENQUIRY_ACTIONS

# Who may take each action: recovery.operator_actions (an enquiry's), ledger.policies (an
# operation's).
INTEGRATION_PERMISSION = "ledger.pause_integration"
# Editing an integration's settings (address, token, timeouts, owner): admins.
CONFIGURE_PERMISSION = "ledger.change_integration"
# What the console pages need at least (every role has it).
VIEW_PERMISSION = "intake.view_enquiry"
# Request information from these states only after the CRM refused the write as invalid.
ASKED_ONLY_AFTER_REFUSAL = (EnquiryState.APPROVED, EnquiryState.SUBMITTED)


def can_assign(user) -> bool:
    return ENQUIRY_ACTIONS["assign"].may(user)


def operation_actions(operation, user) -> list[str]:
    """What the console offers: the ledger's allowed actions, less a Retry where the item page
    says not to retry (a refusal as invalid would be refused again: edit or cancel instead)."""
    from recovery.explain import retry_advised

    try:
        actions = policies.allowed_actions(operation, user)
    except KeyError:  # an action type with no policy: offer nothing rather than guess
        return []
    if "retry" in actions and not retry_advised(operation):
        actions.remove("retry")
    to_operator = operation.enquiry_id is None and operation.action == Action.SEND_NOTICE
    if to_operator and "reassign" in actions:
        actions.remove("reassign")  # a message to an operator: retried, completed or cancelled
    return actions


def enquiry_actions(enquiry, user) -> list[str]:
    available = {t.name for t in enquiry.get_available_state_transitions()}
    actions = [
        name
        for name, action in ENQUIRY_ACTIONS.items()
        if action.transition in available and action.may(user)
    ]
    if (
        "request_information" in actions
        and enquiry.state in ASKED_ONLY_AFTER_REFUSAL
        and refused_write(enquiry) is None  # one query, only for an approved or sent enquiry
    ):
        # Approved or sent: the resident is asked only when the CRM refused the write as invalid.
        actions.remove("request_information")
    if enquiry.closed_at is None and can_assign(user):
        actions.append("assign")
    return actions


def integration_actions(integration: Integration, user) -> list[str]:
    if not user.has_perm(INTEGRATION_PERMISSION):
        return []
    if integration.paused:
        return ["resume"]
    if integration.awaiting_backlog_review:
        return ["release"]
    return ["pause"]
