"""The ledger's services: what the console, intake's signals and the drill call.

Every function is keyword-only after its subject, and follows one shape: lock (enquiry, then
operation), re-check, transition, save, journal, enqueue, all in one transaction. The ORM
broker makes the enqueue part of that transaction.

By sub-domain: ``proposals`` (work the ledger proposes: the receipt's, intake's signals),
``actions`` (a person's approval and recovery of an operation, each in the one skeleton
``common.operator_action``), ``integrations`` (settings, check, pause, resume, backlog),
``appointments``, ``documents`` (a reviewer's request to read a document again).
Callers import from here: ``from ledger import services``.

Errors: ActionRefused (a ValueError) when the state or the policy says no; Django's
PermissionDenied when the actor's role says no.
"""

from ledger.policies import allowed_actions
from ledger.proposals import (
    LEDGER,
    integration,
    nudge_enquiry,
    propose,
    propose_information_request,
    propose_message,
    propose_receipt_work,
    propose_resident_message,
    supersede_revision,
)
from ledger.services.actions import (
    approve_operation,
    approve_revision,
    cancel_operation,
    compensate,
    complete_by_hand,
    not_ready_to_approve,
    reassign_operation,
    reconcile_now,
    refused_write,
    request_information,
    retry_operation,
)
from ledger.services.appointments import needs_visit, request_slots, slots_view
from ledger.services.common import ActionRefused, operator_action
from ledger.services.documents import reprocess_document
from ledger.services.integrations import (
    backlog,
    check_integration,
    configure_integration,
    pause_integration,
    release_backlog,
    resume_integration,
)

__all__ = [
    "LEDGER",
    "ActionRefused",
    "allowed_actions",
    "approve_operation",
    "approve_revision",
    "backlog",
    "cancel_operation",
    "check_integration",
    "compensate",
    "complete_by_hand",
    "configure_integration",
    "integration",
    "needs_visit",
    "not_ready_to_approve",
    "nudge_enquiry",
    "operator_action",
    "pause_integration",
    "propose",
    "propose_information_request",
    "propose_message",
    "propose_receipt_work",
    "propose_resident_message",
    "reassign_operation",
    "reconcile_now",
    "refused_write",
    "release_backlog",
    "reprocess_document",
    "request_information",
    "request_slots",
    "resume_integration",
    "retry_operation",
    "slots_view",
    "supersede_revision",
]
