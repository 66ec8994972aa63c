"""What "Safe now" says on a write the destination refused as invalid, in the actions this
person is offered on the page (never an action they cannot see)."""

from __future__ import annotations

from ledger.models import Action, OperationState
from recovery import explain


def refused_as_invalid(op) -> bool:
    return op.state == OperationState.FAILED and op.attention in ("invalid", "payload_mismatch")


def safe_now(op, enquiry_actions) -> str:
    """``enquiry_actions``: the enquiry-level actions this person is offered on the page; the
    operation's own are ``op.allowed`` (recovery.views.items.decorate)."""
    system = explain.system_name(op)
    said = f" ({system} said: {op.last_error_message[:200]})" if op.last_error_message else ""
    steps = []
    if op.action == Action.CREATE_ENQUIRY and "request_information" in enquiry_actions:
        steps.append(
            "if it needs something only the resident knows, Request information asks them; "
            "their answer comes back to review as a new revision, and its approval makes a "
            "new write"
        )
    if "edit" in enquiry_actions:
        steps.append("if the enquiry's own fields are wrong, Edit it (a new revision)")
    if "cancel" in op.allowed:
        steps.append(f"or {explain.cancel_label(op)}")
    words = f"Do not retry as it is: it would be refused again{said}."
    if steps:
        return f"{words} {'; '.join(steps)}."
    if "reassign" in op.allowed:
        return (
            f"{words} A reviewer may ask the resident (Request information) or edit it: "
            "reassign it to one."
        )
    return f"{words} A reviewer may ask the resident (Request information) or edit it."
