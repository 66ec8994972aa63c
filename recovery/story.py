"""The item's story at a glance: received, reviewed by whom, each attempt with its outcome,
each person's action with its reason, and where it stands now (owner, due).

Built on the server from what the item page already read (the enquiry, its operations with
their attempts, its journal), in the queue's words (recovery.words) and times (|when). The
journal stays the full record; the story leaves out the system's bookkeeping (validation, a
write proposed or submitted) and keeps what a person would ask about.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from recovery.operator_actions import ACTIONS
from recovery.words import action_label, in_sentence, outcome_label

# The enquiry's steps as the story tells them: journal action -> (words, tone). A person's
# row is always told; a system row only if it is here.
ENQUIRY_STEPS = {
    "intake.enquiry.mark_ready_for_review": ("Ready for review", ""),
    "intake.enquiry.request_information": ("Information asked of the customer", "wait"),
    "intake.enquiry.information_received": ("The customer's information received", ""),
    "intake.enquiry.revise": ("Edited: a new revision", ""),
    "intake.enquiry.approve": ("Approved for delivery", "ok"),
    "intake.enquiry.reject": ("Rejected", "bad"),
    "intake.enquiry.mark_submission_unknown": ("Delivery outcome unknown", "bad"),
    "intake.enquiry.delivery_failed": ("Not delivered", "bad"),
    "intake.enquiry.confirm": ("Confirmed", "ok"),
    "intake.enquiry.withdraw": ("Closed without delivery", "bad"),
    "intake.enquiry.assigned": ("Owner set", ""),
    "intake.enquiry.redacted": ("Personal details redacted", ""),
    "intake.enquiry.resident_answered": ("The resident answered: a new revision", ""),
    "intake.enquiry.attached_as_reply": ("Attached to another enquiry as a reply", ""),
    "intake.enquiry.new_link_requested": ("The resident asked for a new link", ""),
    # A step the resident should have heard about, and why they were not told (ledger.wording).
    "ledger.resident_message.not_sent": ("Nothing sent to the resident", "wait"),
}
# A person's action on an operation, in the words of the button they pressed.
OPERATION_ACTIONS = {
    "recovery.operation.reconcile_requested": ACTIONS["reconcile"].label,
    "recovery.operation.reassigned": ACTIONS["reassign"].label,
    "recovery.operation.compensation_proposed": ACTIONS["compensate"].label,
    "ledger.operation.retry": ACTIONS["retry"].label,
    "ledger.operation.cancel": ACTIONS["cancel"].label,
    "ledger.operation.approve": ACTIONS["approve"].label,
    "ledger.operation.confirm": ACTIONS["complete_by_hand"].label,
}
ATTEMPT_TONES = {"success": "ok", "found": "ok", "not_found": "", "": "wait"}
# Longer than this, the middle folds: the first lines (how it began) and the latest stay.
SHORT = 12
HEAD = 3


@dataclass
class Line:
    at: datetime | None
    what: str
    who: str = ""
    reason: str = ""
    tone: str = ""  # "ok", "bad", "wait" or "" (a colour and a mark, never the only signal)


@dataclass
class Story:
    lines: list[Line]
    folded: list[Line]  # the middle of a long story, behind a "show all" fold
    now: str  # where it stands: state, owner, due
    head: int = HEAD  # the fold comes after this many lines


def _who(row) -> str:
    if row.actor_user_id is not None and row.actor_user is not None:
        return row.actor_user.get_username()
    return "" if not row.actor.startswith("user:") else row.actor.removeprefix("user:")


def _enquiry_line(row) -> Line | None:
    step = ENQUIRY_STEPS.get(row.action)
    who = _who(row)
    if step is None and not who:
        return None
    what, tone = step or (row.action.rsplit(".", 1)[-1].replace("_", " ").capitalize(), "")
    # A system's reason ("CRM record CRM-1042 confirmed") is the fact; a person's is their why.
    if not who and row.reason:
        return Line(row.at, f"{what}: {row.reason}", "", "", tone)
    return Line(row.at, what, who, row.reason, tone)


def _operation_line(row, op) -> Line | None:
    who = _who(row)
    if not who:
        return None
    label = OPERATION_ACTIONS.get(row.action)
    if label is None:
        label = row.action.rsplit(".", 1)[-1].replace("_", " ").capitalize()
    return Line(row.at, f"{label}: {in_sentence(action_label(op.action))}", who, row.reason, "")


def _attempt_line(op, attempt) -> Line:
    outcome = outcome_label(attempt.outcome)
    status = f" · HTTP {attempt.response_status}" if attempt.response_status else ""
    kind = "look-up" if attempt.kind == "lookup" else f"attempt {attempt.number}"
    what = f"{action_label(op.action)}, {kind}: {outcome}{status}"
    return Line(attempt.started_at, what, "", "", ATTEMPT_TONES.get(attempt.outcome, "bad"))


def tell(enquiry, operations, journal, *, owner, due, now) -> Story:
    """The story of ``enquiry``: its lines oldest first, the middle folded when long."""
    lines = [Line(enquiry.created_at, f"Received from {enquiry.source}", "", "", "")]
    ops = {str(op.pk): op for op in operations}
    for row in journal:
        if row.subject_type == "intake.enquiry":
            line = _enquiry_line(row)
        elif (
            row.subject_type == "ledger.operation"
            and row.subject_id in ops
            and (row.action in OPERATION_ACTIONS or row.action.startswith("recovery.operation."))
        ):
            line = _operation_line(row, ops[row.subject_id])
        else:
            line = None
        if line is not None:
            lines.append(line)
    for op in operations:
        lines.extend(_attempt_line(op, attempt) for attempt in op.attempts.all())
    lines.sort(key=lambda line: line.at)
    folded = []
    if len(lines) > SHORT:
        folded = lines[HEAD : len(lines) - (SHORT - HEAD)]
        lines = lines[:HEAD] + lines[len(lines) - (SHORT - HEAD) :]
    return Story(lines=lines, folded=folded, now=standing(enquiry, owner=owner, due=due, now=now))


def standing(enquiry, *, owner, due, now) -> str:
    """ "Now: submission unknown · owner casey (assigned) · overdue 2 h" in the queue's words."""
    from recovery.templatetags.console import age, until

    parts = [f"Now: {enquiry.get_state_display()}"]
    if owner is not None and owner.user is not None:
        why = f" ({owner.why})" if owner.why else ""
        parts.append(f"owner {owner.user.get_username()}{why}")
    elif enquiry.state not in ("confirmed", "rejected"):
        parts.append("owner nobody")
    if due is not None:
        parts.append(f"overdue {age(due)}" if due < now else f"due {until(due)}")
    return " · ".join(parts)
