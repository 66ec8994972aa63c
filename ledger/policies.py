"""The action-type policy table: one place in code that says, for each kind of external action,
what it is, how it recovers and what is checked before anything is repeated.

docs/integrations.md shows this same table by hand: change both together.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from ledger.connectors.base import Connector
from ledger.connectors.suggester import SuggesterConnector
from ledger.models import (
    Action,
    Integration,
    OperationState,
    cancel_permission,
    kind_of,
    retry_permission,
)

READ, WRITE = "read", "write"


@dataclass(frozen=True)
class Policy:
    action: str
    kind: str  # read or write
    integration: str | None  # Integration.name; None: runs in process (the suggester)
    recovery: str
    check_first: str
    # Approved by the system when proposed (reads, the acknowledgement), or by a person.
    system_approved: bool
    # Who may approve it when a person must: a Django permission.
    approve_permission: str = "intake.approve_revision"
    # Whether a person's retry is offered after `failed` (never for a duplicate or an
    # uncertain write the destination could not be asked about).
    manual_retry: bool = True
    compensated_by: str | None = None
    # Approved only with the enquiry's revision (a reviewer's "Approve revision"), never on its
    # own: approving the operation alone would authorise a revision nobody reviewed.
    approved_by_revision: bool = False
    # Used when there is no integration row to read the budget from.
    default_retry_budget: int = 3
    default_backoff_seconds: float = 1.0
    # The connector of work that leaves Handover through no integration row. Every other
    # action's connector comes from its integration's kind (ledger.kinds).
    in_process: type | None = None

    @property
    def is_write(self) -> bool:
        return self.kind == WRITE


POLICIES: dict[str, Policy] = {
    p.action: p
    for p in [
        Policy(
            Action.SUGGEST_CATEGORY,
            READ,
            None,
            recovery="bounded retry, then `unresolved`",
            check_first="is a suggestion for this revision already stored?",
            system_approved=True,
            in_process=SuggesterConnector,
        ),
        Policy(
            Action.READ_APPOINTMENTS,
            READ,
            Integration.APPOINTMENTS,
            recovery="bounded retry; stale data is re-read or reported stale",
            check_first="is the response still fresh?",
            system_approved=True,
        ),
        Policy(
            Action.EXTRACT_DOCUMENT,
            READ,
            Integration.DOCUMENTS,
            recovery="reprocess the same document version; access failure is a visible failure",
            check_first="has a reviewer already corrected it? (the correction wins)",
            system_approved=True,
        ),
        Policy(
            Action.CREATE_ENQUIRY,
            WRITE,
            Integration.CRM,
            recovery="reconcile before retry",
            check_first="does the external record exist (lookup by reference)?",
            system_approved=False,
            compensated_by=Action.CLOSE_ENQUIRY,
            approved_by_revision=True,
        ),
        Policy(
            Action.SEND_NOTICE,
            WRITE,
            Integration.NOTIFY,
            recovery="check delivery state",
            check_first="was it accepted by the provider?",
            system_approved=True,
        ),
        Policy(
            Action.CLOSE_ENQUIRY,
            WRITE,
            Integration.CRM,
            recovery="compensation; reconcile before retry",
            check_first="is the record already closed?",
            system_approved=False,
            approve_permission="ledger.recover_operation",
        ),
    ]
}

# Attention codes: why a person must look at an operation (Operation.attention).
ATTENTION = {
    "lookup_unavailable": "The destination cannot be asked whether the record exists.",
    "lookup_failed": "Asking the destination whether the record exists failed.",
    "duplicate_records": "The destination holds more than one record for this reference.",
    "reference_not_stored": (
        "The destination made a record but did not keep Handover's reference on it, so it "
        "cannot be found again by look-up; check the record it named and complete by hand."
    ),
    "retry_budget_exhausted": "The destination stayed unavailable for every allowed attempt.",
    "invalid": "The destination refused the request as it is.",
    "auth": "The destination refused Handover's credentials; the integration owner is told.",
    "access_denied": "Handover may no longer read this document.",
    "document_changed": (
        "The document changed after it was attached: this version is no longer there, so it "
        "was not read; the version there now is read as a new version."
    ),
    "delivery_failed": "The provider accepted the message but could not deliver it.",
    "smtp_no_reply": (
        "The message went to the e-mail relay and its reply never came; a relay cannot be "
        "asked whether it queued it, so a person checks before anything is sent again."
    ),
    "payload_mismatch": "The payload differs from the approved one; nothing was sent.",
    "unresolved": "The suggester gave no usable answer; the enquiry waits for review.",
    "internal_error": (
        "An error inside Handover stopped the call before anything was sent: not the "
        "destination's answer. The maintainer looks; then a retry is safe."
    ),
    "throttled_too_often": (
        "The destination answered \u201cwait\u201d (429) too many times in a row; a person "
        "decides when to try again."
    ),
}


def policy_for(operation_or_action) -> Policy:
    action = getattr(operation_or_action, "action", operation_or_action)
    try:
        return POLICIES[action]
    except KeyError:
        raise KeyError(f"no policy for action {action!r}") from None


def retry_budget(operation) -> tuple[int, float]:
    """(attempts allowed, first backoff in seconds) for the operation's integration."""
    policy = policy_for(operation)
    integration = operation.integration
    if integration is None:
        return policy.default_retry_budget, policy.default_backoff_seconds
    return max(1, integration.retry_budget), max(0.0, integration.backoff_seconds)


@dataclass(frozen=True)
class RetrySchedule:
    """When a transient failure (nothing sent) is tried again: ``first`` seconds after the
    first failure, doubling, at most ``cap``; for ``attempts`` calls in all, or, with a
    ``window``, for as long as that many seconds since the budget's first attempt last (the
    last try at the window's end). Then `failed`, for a person."""

    first: float
    attempts: int | None = None
    cap: float | None = None
    window: float | None = None

    def delay(self, used: int) -> float:
        """Seconds before the next try after ``used`` calls of the budget."""
        delay = self.first * 2 ** min(max(used - 1, 0), 40)
        return delay if self.cap is None else min(delay, self.cap)


def retry_schedule(operation) -> RetrySchedule:
    """The operation's schedule: e-mail's window for a kind that is retried as e-mail is
    (ledger.kinds, the EMAIL_RETRY_* settings), else the integration's retry budget."""
    integration = operation.integration
    if integration is not None and kind_of(integration).retries == "email":
        return RetrySchedule(
            first=settings.EMAIL_RETRY_FIRST_SECONDS,
            cap=settings.EMAIL_RETRY_MAX_SECONDS,
            window=settings.EMAIL_RETRY_HOURS * 3600.0,
        )
    attempts, backoff = retry_budget(operation)
    return RetrySchedule(first=backoff, attempts=attempts)


# --- what a person may do next --------------------------------------------------------------
RECONCILE, RETRY, COMPLETE, CANCEL, COMPENSATE, APPROVE, REASSIGN = (
    "reconcile",
    "retry",
    "complete_by_hand",
    "cancel",
    "compensate",
    "approve",
    "reassign",
)
# On an integration, not an operation (ledger.services.integrations.release_backlog): never
# offered by an operation's state.
RELEASE = "release"
PERMISSIONS = {
    RECONCILE: "ledger.triage_operation",
    RETRY: "ledger.recover_operation",
    COMPLETE: "ledger.triage_operation",
    CANCEL: "ledger.triage_operation",
    COMPENSATE: "ledger.recover_operation",
    REASSIGN: "ledger.triage_operation",
    RELEASE: "ledger.pause_integration",
}


def state_allows(operation) -> list[str]:
    """Actions the operation's state and policy allow, whoever asks."""
    policy = policy_for(operation)
    state = operation.state
    actions = []
    if state == OperationState.PROPOSED:
        # A revision's write waits for the revision's approval: nothing to do on the operation
        # (cancelling it would decide nothing either; the reviewer approves or rejects).
        if not policy.approved_by_revision:
            actions += [APPROVE, CANCEL]
    elif state == OperationState.APPROVED:
        actions += [CANCEL]
    elif state == OperationState.UNKNOWN:
        actions += [RECONCILE, COMPLETE]
        if retry_allowed_from_unknown(operation):
            actions.append(RETRY)
    elif state == OperationState.FAILED:
        if policy.manual_retry and operation.attention != "duplicate_records":
            actions.append(RETRY)
        actions.append(COMPLETE)
        # Records seen at the destination are not undone by cancelling here: complete by hand
        # with the one that stands (and close the others there), never "cancel safely".
        if not operation.records_observed():
            actions.append(CANCEL)
    elif (
        state == OperationState.CONFIRMED
        and policy.compensated_by
        and not operation.compensations.exclude(state=OperationState.CANCELLED).exists()
    ):
        actions.append(COMPENSATE)
    if state not in (OperationState.CONFIRMED, OperationState.CANCELLED):
        actions.append(REASSIGN)
    return actions


def retry_allowed_from_unknown(operation) -> bool:
    """Never a blind repeat of a consequential write.

    A read is safe to repeat. A write is offered for retry only when a person has been asked to
    look because the destination could not be (then the retry is their informed decision), and
    never when duplicates were found.
    """
    policy = policy_for(operation)
    if not policy.is_write:
        return True
    return operation.attention in ("lookup_unavailable", "lookup_failed", "smtp_no_reply")


def permission_for(operation, action, policy=None) -> str:
    """The permission a person needs for ``action`` on this operation now."""
    if action == APPROVE:
        return (policy or policy_for(operation)).approve_permission
    if action == CANCEL:
        return cancel_permission(operation)
    if action == RETRY:
        return retry_permission(operation)
    return PERMISSIONS[action]


def allowed_actions(operation, user) -> list[str]:
    """State + policy + the user's permissions: what the console offers for this operation."""
    policy = policy_for(operation)
    allowed = []
    for action in state_allows(operation):
        permission = permission_for(operation, action, policy)
        if user.has_perm(permission):
            allowed.append(action)
    return allowed


# --- who carries it out ------------------------------------------------------------------------
def connector_for(operation) -> Connector:
    """The connector for an operation: its integration's kind's, or the policy's in-process
    one (work that leaves Handover through no integration, such as the suggester)."""
    integration = operation.integration
    if integration is None:
        policy = policy_for(operation)
        if policy.in_process is None:
            raise LookupError(f"{operation.action} needs an integration and has none")
        return policy.in_process(None, retry_budget=retry_budget(operation)[0])
    cls = kind_of(integration).connector_class(integration.name, operation.action)
    return cls(integration)
