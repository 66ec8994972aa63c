"""What the drill's cases do again and again: bring an event to review, deliver it to the CRM,
count the CRM's create calls."""

from __future__ import annotations

from harness.drill.results import CaseResult
from harness.drill.runner import Drill
from intake.models import Enquiry, EnquiryState
from ledger.models import Operation, OperationState

CLEANUP = "drill: case finished, resolving the drill's own item"
# What the drill's own resident is told when its item is closed at the end of a case.
CLEANUP_FOR_RESIDENT = "This enquiry was part of a test of our systems; nothing more will happen."


def ready_for_review(d: Drill, case: CaseResult, **fields) -> Enquiry:
    """Send the case's event and wait for receipt work (suggestion, acknowledgement) to finish."""
    enquiry = d.send(case, **fields)
    d.wait_enquiry(enquiry, EnquiryState.READY_FOR_REVIEW)
    d.settle(enquiry)
    return enquiry


def deliver_to_crm(d: Drill, case: CaseResult, enquiry, actor=None) -> Operation:
    op = d.approve(enquiry, actor=actor)
    op = d.wait_operation(
        op, lambda o: o.state == OperationState.CONFIRMED, "the CRM write to be confirmed"
    )
    d.wait_enquiry(enquiry, EnquiryState.CONFIRMED)
    return op


def create_calls_since(d: Drill, before) -> int | None:
    """Create calls since ``before`` (None: this destination does not count its requests)."""
    now = d.destination.requests_to("crm.create")
    return None if now is None or before is None else now - before
