"""The item page's four answers, in plain words, from the stored evidence only.

What was the workflow trying to do? Which step finished? Did an external system change? What is
safe to do now? Every sentence here is built from rows (the enquiry, its revisions, operations,
attempts, journal); nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone
from django.utils.formats import date_format

from intake.models import EnquiryState as S
from ledger.models import Op
from recovery.words import ATTENTION, action_label

WRITE_ACTIONS = ("crm.create_enquiry", "crm.close_enquiry", "notify.send")
SYSTEM_NAMES = {"crm": "the CRM", "notify": "the notification provider"}


def when(value) -> str:
    if value is None:
        return "an unknown time"
    return date_format(timezone.localtime(value), "j M Y, H:i")


def system_name(op) -> str:
    integration = op.integration
    if integration is None:
        return "the suggester"
    return SYSTEM_NAMES.get(integration.name, integration.get_name_display())


@dataclass
class Step:
    label: str
    status: str  # done, current, uncertain, failed, waiting, skipped
    detail: str = ""


@dataclass
class Answers:
    trying: str
    steps: list[Step]
    finished: str
    changed: list[str] = field(default_factory=list)
    safe: list[str] = field(default_factory=list)


def last_attempt(op):
    attempts = list(op.attempts.all())
    return attempts[-1] if attempts else None


def _failure_kind(op) -> str:
    """transient, invalid, auth, duplicate, lookup, or '' from the operation's evidence."""
    if op.attention == "duplicate_records":
        return "duplicate"
    if op.attention in ("lookup_unavailable", "lookup_failed", "reference_not_stored"):
        return "lookup"
    if op.attention in ("invalid", "payload_mismatch"):
        return "invalid"
    if op.attention == "auth":
        return "auth"
    attempt = last_attempt(op)
    outcome = (attempt.outcome if attempt else "") or op.last_error_class
    if outcome in ("invalid", "auth", "transient"):
        return outcome
    if op.attention == "retry_budget_exhausted":
        return "transient"
    return outcome or ""


def external_change(op) -> str:
    system = system_name(op)
    attempt = last_attempt(op)
    status = f" (HTTP {attempt.response_status})" if attempt and attempt.response_status else ""
    calls = sum(1 for a in op.attempts.all() if a.kind == "call")
    if op.state == Op.CONFIRMED:
        ref = f" {op.external_id}" if op.external_id else ""
        what = action_label(op.action).lower()
        return f"Yes. {system.capitalize()} holds record{ref} for this enquiry ({what})."
    if op.state == Op.UNKNOWN:
        sent = when(attempt.started_at) if attempt else "an unknown time"
        text = (
            f"Maybe. The request to {system} was sent at {sent} and no answer came back: "
            f"{system} may have done it."
        )
        if op.attention in ("lookup_unavailable", "lookup_failed"):
            text += f" {ATTENTION[op.attention]}"
        if op.attention == "reference_not_stored":
            made = op.result.get("unconfirmed_external_id") or "a record"
            text = (
                f"Probably. {system.capitalize()} answered that it made {made}, but without "
                "Handover's reference on it, so a look-up cannot confirm it."
            )
        return text
    if op.state == Op.FAILED:
        kind = _failure_kind(op)
        if kind == "duplicate":
            return f"Yes, more than once: {system} holds more than one record for this reference."
        if kind == "invalid":
            msg = f": {op.last_error_message}" if op.last_error_message else ""
            return f"No. {system.capitalize()} refused the request as invalid{status}{msg}."
        if kind == "auth":
            return f"No. {system.capitalize()} refused Handover's credentials{status}."
        attempts = f" on {calls} attempt{'s' if calls != 1 else ''}" if calls else ""
        return f"No. {system.capitalize()} did not accept the request{status}{attempts}."
    if op.state == Op.SUBMITTED:
        return f"In flight: a worker is calling {system} now (since {when(op.state_changed_at)})."
    if op.state == Op.CANCELLED:
        return f"No. Cancelled before anything reached {system}."
    return f"Not yet: nothing has been sent to {system}."


def safe_now(op) -> str:
    system = system_name(op)
    kind = _failure_kind(op)
    if op.state == Op.UNKNOWN:
        if op.attention == "reference_not_stored":
            made = op.result.get("unconfirmed_external_id") or "the record it named"
            return (
                f"Open {made} in {system}. If it is this enquiry, complete by hand with that ID. "
                f"Do not retry: a retry would make a second record. Then fix {system} so it keeps "
                "the reference (manage.py check_integration says what is missing)."
            )
        if kind == "lookup":
            return (
                f"Look in {system} by hand for reference {op.enquiry.reference}. Found: complete "
                "by hand with its reference. Not there: retry (same idempotency key)."
            )
        return (
            f"Reconcile now: it asks {system} for the record by reference and changes nothing "
            "there. Do not retry first: a blind retry could create a second record."
        )
    if op.state == Op.FAILED:
        if kind == "duplicate":
            return (
                f"Do not retry. Decide which record in {system} is right, complete by hand with "
                "its reference, and close the other one there."
            )
        if kind == "invalid":
            return (
                "Do not retry as it is: it would be refused again. Edit the enquiry (a new "
                "revision, reviewed again) or cancel safely."
            )
        if kind == "auth":
            return (
                "Do not retry until the integration's owner has fixed the credentials; then "
                "retry. If every request fails like this, pause the integration."
            )
        return (
            f"Retry: {system} never accepted the request, so a retry with the same idempotency "
            "key cannot duplicate it. If it is down for everyone, pause the integration first."
        )
    if op.state == Op.CONFIRMED:
        return "Nothing is needed. If it should not have happened, propose a compensation."
    if op.state == Op.SUBMITTED:
        return "Wait: the worker's answer decides. If it stays here, the sweeper reconciles it."
    if op.state in (Op.PROPOSED, Op.APPROVED):
        return "Nothing yet: it runs when approved and when its integration is not paused."
    return "Nothing: this operation is finished."


def answers(enquiry, operations, journal, *, revision=None) -> Answers:
    ops = list(operations)
    writes = [op for op in ops if op.action in WRITE_ACTIONS]
    approved = enquiry.approved_revision
    crm = next((op for op in reversed(writes) if op.action == "crm.create_enquiry"), None)
    notify = next((op for op in reversed(writes) if op.action == "notify.send"), None)
    state = enquiry.state

    if state in (S.RECEIVED, S.VALIDATED):
        trying = f"Check {enquiry.reference} and suggest a category, so a reviewer can look at it."
    elif state == S.READY_FOR_REVIEW:
        trying = (
            f"Get revision {enquiry.current_revision} of {enquiry.reference} reviewed and "
            "approved; "
            "nothing is sent to the CRM before that."
        )
    elif state == S.NEEDS_INFORMATION:
        trying = "Get the missing information from the customer before review continues."
    elif state == S.REJECTED:
        trying = f"Nothing more: {enquiry.reference} was closed without delivery."
    else:
        trying = (
            f"Deliver revision {approved or enquiry.current_revision} of {enquiry.reference} to "
            "the CRM as a new enquiry record, then acknowledge the customer."
        )

    done_states = {row.to_state for row in journal if row.subject_type == "intake.enquiry"}
    approval = next(
        (
            row
            for row in reversed(journal)
            if row.action == "intake.enquiry.approve" and row.to_state == S.APPROVED
        ),
        None,
    )
    steps = [
        Step("Received", "done", f"from {enquiry.source}, {when(enquiry.created_at)}"),
        Step(
            "Checked",
            "done" if S.VALIDATED in done_states or state != S.RECEIVED else "waiting",
        ),
    ]
    if state == S.NEEDS_INFORMATION:
        steps.append(Step("Reviewed", "current", "waiting for the customer's information"))
    elif state == S.REJECTED and not approved:
        steps.append(Step("Reviewed", "done", "rejected"))
    elif approved:
        who = approval.actor.removeprefix("user:") if approval else "a reviewer"
        steps.append(
            Step(
                "Reviewed and approved",
                "done",
                f"revision {approved} by {who}, {when(approval.at if approval else None)}",
            )
        )
    else:
        steps.append(
            Step("Reviewed and approved", "current" if state == S.READY_FOR_REVIEW else "waiting")
        )
    for label, op in (("Written to the CRM", crm), ("Customer acknowledged", notify)):
        if op is None:
            steps.append(Step(label, "waiting"))
            continue
        status = {
            Op.CONFIRMED: "done",
            Op.UNKNOWN: "uncertain",
            Op.FAILED: "failed",
            Op.SUBMITTED: "current",
            Op.CANCELLED: "skipped",
        }.get(op.state, "waiting")
        detail = op.get_state_display()
        if op.external_id:
            detail += f", reference {op.external_id}"
        steps.append(Step(label, status, detail))

    finished_steps = [s for s in steps if s.status == "done"]
    finished = f"{finished_steps[-1].label}" if finished_steps else "None yet"
    if finished_steps and finished_steps[-1].detail:
        finished += f" ({finished_steps[-1].detail})"
    following = steps[len(finished_steps)] if len(finished_steps) < len(steps) else None
    status_words = {
        "uncertain": "has an unknown outcome: it may or may not have happened",
        "failed": "failed",
        "current": "is in progress",
    }
    if following and following.status in status_words:
        finished += f". The step after it, “{following.label}”, {status_words[following.status]}."
    else:
        finished += "."

    changed = [f"{action_label(op.action)}: {external_change(op)}" for op in writes]
    if not changed:
        changed = ["No. Nothing has been sent to an external system yet."]

    safe = []
    for op in ops:
        if op.state in (Op.UNKNOWN, Op.FAILED, Op.SUBMITTED) or (
            op.state == Op.CONFIRMED and op.action == "crm.create_enquiry"
        ):
            safe.append(f"{action_label(op.action)}: {safe_now(op)}")
    if state == S.READY_FOR_REVIEW:
        safe.insert(0, "Review it: approve, edit (a new revision), request information or reject.")
    elif state == S.NEEDS_INFORMATION:
        safe.insert(0, "Wait for the customer; when they answer, mark the information received.")
    if not safe:
        safe = ["Nothing is needed from a person right now."]
    return Answers(trying=trying, steps=steps, finished=finished, changed=changed, safe=safe)


RUNBOOKS = {
    "unknown-outcome": "Outcome unknown (a timeout or a lost answer)",
    "reconciliation-queue": "The destination cannot be looked up",
    "duplicate-records": "More than one record at the destination",
    "destination-unavailable": "Destination unavailable (retries used up)",
    "invalid-request": "Refused as invalid (400/409/422)",
    "credentials-refused": "Credentials refused (401/403)",
    "notification-failed": "The customer's acknowledgement failed",
    "document-access": "A document cannot be read",
    "needs-information": "Waiting for the customer's information",
    "unresolved-classification": "Classification unresolved",
    "receipt-pending": "Receipts not taken up by a worker",
    "pause-procedure": "Pausing and resuming an integration",
    "throttled": "Throttled by a destination (429 / Retry-After)",
    "queue-owners": "Who owns which queue",
}


def runbook_for_operation(op) -> str:
    kind = _failure_kind(op)
    if op.action == "notify.send" and op.state != Op.UNKNOWN:
        return "notification-failed"
    if op.attention == "access_denied" or op.action == "documents.extract":
        return "document-access"
    if op.state == Op.UNKNOWN and kind != "lookup":
        return "unknown-outcome"
    if op.state == Op.APPROVED and kind == "throttled":
        return "throttled"  # asked to wait, not failed (ledger.limits)
    return {
        "lookup": "reconciliation-queue",
        "duplicate": "duplicate-records",
        "invalid": "invalid-request",
        "auth": "credentials-refused",
    }.get(kind, "destination-unavailable")


def runbook_for_enquiry(enquiry) -> str | None:
    if enquiry.state == S.NEEDS_INFORMATION:
        return "needs-information"
    if enquiry.state == S.SUBMISSION_UNKNOWN:
        return "unknown-outcome"
    if enquiry.state == S.READY_FOR_REVIEW and enquiry.category_id is None:
        return "unresolved-classification"
    return None
