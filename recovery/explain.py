"""The item page's four answers, in plain words, from the stored evidence only.

What was the workflow trying to do? Which step finished? Did an external system change? What is
safe to do now? Every sentence here is built from rows (the enquiry, its revisions, operations,
attempts, journal); nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone

from intake.models import EnquiryState
from ledger.models import Action, OperationState
from ledger.policies import connector_for
from recovery import timefmt
from recovery.words import ATTENTION, action_label, in_sentence

WRITE_ACTIONS = (Action.CREATE_ENQUIRY, Action.CLOSE_ENQUIRY, Action.SEND_NOTICE)
SYSTEM_NAMES = {"crm": "the CRM", "notify": "the notification provider"}


# How ledger.execution.executing.internal_error begins a read's own failure.
READING_FAILED = "error inside Handover while reading"


def when(value) -> str:
    if value is None:
        return "an unknown time"
    return timefmt.local(value)


def system_name(op) -> str:
    """The integration as a sentence names it ("the CRM"); capitalise with ``sentence``."""
    integration = op.integration
    if integration is None:
        return "the suggester"
    return SYSTEM_NAMES.get(integration.name, integration.get_name_display())


def sentence(text: str) -> str:
    """First letter up, the rest as written: "the CRM" -> "The CRM" (str.capitalize would
    give "The crm")."""
    return text[:1].upper() + text[1:]


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
    # (system, [Record]) for each write whose destination was seen to hold records for it
    records: list = field(default_factory=list)


def last_attempt(op):
    attempts = list(op.attempts.all())
    return attempts[-1] if attempts else None


def _failure_kind(op) -> str:
    """transient, invalid, auth, duplicate, lookup, or '' from the operation's evidence."""
    if op.attention == "duplicate_records":
        return "duplicate"
    if op.attention in (
        "lookup_unavailable",
        "lookup_failed",
        "reference_not_stored",
        "smtp_no_reply",
    ):
        return "lookup"
    if op.attention in ("invalid", "payload_mismatch"):
        return "invalid"
    if op.attention == "auth":
        return "auth"
    if op.attention == "internal_error" or op.last_error_class == "internal":
        return "internal"
    if op.attention == "throttled_too_often":
        return "throttled"
    attempt = last_attempt(op)
    outcome = (attempt.outcome if attempt else "") or op.last_error_class
    if outcome in ("invalid", "auth", "transient"):
        return outcome
    if op.attention == "retry_budget_exhausted":
        return "transient"
    return outcome or ""


def attempt_summary(op) -> dict:
    """The request summary of the operation's last call (what was sent, as recorded)."""
    calls = [a for a in op.attempts.all() if a.kind == "call"]
    return calls[-1].request_summary if calls else {}


def last_lookup(op):
    lookups = [a for a in op.attempts.all() if a.kind == "lookup"]
    return lookups[-1] if lookups else None


def seen_at(attempt) -> str:
    """ " (seen at 14:02, 1 Dec 2026, HTTP 501)": when a piece of evidence was observed."""
    if attempt is None:
        return ""
    # An e-mail's attempt records the relay's reply code, which is not an HTTP status.
    protocol = "SMTP" if (attempt.request_summary or {}).get("method") == "SMTP" else "HTTP"
    status = f", {protocol} {attempt.response_status}" if attempt.response_status else ""
    return f" (seen {when(attempt.started_at)}{status})"


def external_change(op) -> str:
    """Answered from what was observed at the destination (a look-up's records, an answer),
    never from the operation's state alone: a cancelled write whose look-up found two records
    did change the destination."""
    system = system_name(op)
    attempt = last_attempt(op)
    status = f" (HTTP {attempt.response_status})" if attempt and attempt.response_status else ""
    calls = sum(1 for a in op.attempts.all() if a.kind == "call")
    seen = op.records_observed()
    if op.state != OperationState.CONFIRMED and len(seen) > 1:
        return (
            f"Yes, more than once: {system} holds {len(seen)} records for reference "
            f"{op.payload.get('reference') or op.reference}: {', '.join(seen)}"
            f"{seen_at(last_lookup(op))}."
        )
    unanswered = op.unanswered_calls()
    if op.state == OperationState.CANCELLED and unanswered and not seen:
        return (
            f"Maybe. Cancelled here, but a request to {system} got no answer, so {system} may "
            f"hold a record for {op.payload.get('reference') or op.reference}: "
            "cancelling here undid nothing there."
        )
    if op.state == OperationState.CONFIRMED:
        ref = f" {op.external_id}" if op.external_id else ""
        what = in_sentence(action_label(op.action))
        return f"Yes. {sentence(system)} holds record{ref} for this enquiry ({what})."
    if op.state == OperationState.UNKNOWN:
        sent = when(attempt.started_at) if attempt else "an unknown time"
        text = (
            f"Maybe. The request to {system} was sent at {sent} and no answer came back: "
            f"{system} may have done it."
        )
        if op.attention in ("lookup_unavailable", "lookup_failed"):
            text += f" {ATTENTION[op.attention].rstrip('.')}{seen_at(last_lookup(op))}."
            if lookup_possible_now(op):
                text += f" {sentence(system)} can be looked up now: Reconcile now asks it."
        elif op.attention == "smtp_no_reply":
            text += f" {ATTENTION[op.attention]}"
        if op.attention == "reference_not_stored":
            made = op.result.get("unconfirmed_external_id") or "a record"
            text = (
                f"Probably. {system.capitalize()} answered that it made {made}, but without "
                "Handover's reference on it, so a look-up cannot confirm it."
            )
        return text
    if op.state == OperationState.FAILED:
        kind = _failure_kind(op)
        if kind == "duplicate":
            return f"Yes, more than once: {system} holds more than one record for this reference."
        if kind == "invalid":
            msg = f": {op.last_error_message}" if op.last_error_message else ""
            return f"No. {sentence(system)} refused the request as invalid{status}{msg}."
        if kind == "auth":
            return f"No. {sentence(system)} refused Handover's credentials{status}."
        if kind == "internal" and op.last_error_message.startswith(READING_FAILED):
            return (
                f"No. {sentence(system)} answered a read, which changes nothing there, and an "
                f"error inside Handover stopped reading the answer ({op.last_error_message[:300]})."
            )
        if kind == "internal":
            return (
                f"No. An error inside Handover stopped the call before anything was sent to "
                f"{system} ({op.last_error_message[:300]})."
            )
        if kind == "throttled":
            return (
                f"No. {sentence(system)} answered \u201cwait\u201d (429) to every recent "
                f"attempt ({calls} in all); it accepted nothing."
            )
        attempts = f" on {calls} attempt{'s' if calls != 1 else ''}" if calls else ""
        return f"No. {sentence(system)} did not accept the request{status}{attempts}."
    if op.state == OperationState.SUBMITTED:
        return f"In flight: a worker is calling {system} now (since {when(op.state_changed_at)})."
    if op.state == OperationState.CANCELLED:
        if calls:
            tries = f"{calls} attempt{'s' if calls != 1 else ''}"
            return f"No. Cancelled after {tries} that {system} did not accept{status}."
        return f"No. Cancelled before anything reached {system}."
    return f"Not yet: nothing has been sent to {system}."


@dataclass(frozen=True)
class Record:
    """A record the destination was seen to hold, and where to open it (or "")."""

    id: str
    url: str = ""


def records_at_destination(op) -> list[Record]:
    """The records ``op.records_observed()`` names, each with the destination's address for it
    when it has one (the connector's record_url): the page names them and links them."""
    seen = op.records_observed()
    if not seen or op.integration is None:
        return [Record(r) for r in seen]
    try:
        connector = connector_for(op)
    except LookupError:
        return [Record(r) for r in seen]
    return [Record(r, connector.record_url(r) or "") for r in seen]


def duplicate_advice(op) -> str:
    system = system_name(op)
    seen = op.records_observed()
    named = f" ({', '.join(seen)})" if seen else ""
    return (
        f"Do not retry or cancel: {system} holds these records{named}. Decide which one is "
        "right, complete by hand with its reference, and close the other one there."
    )


def safe_now(op) -> str:
    system = system_name(op)
    kind = _failure_kind(op)
    if op.state == OperationState.UNKNOWN and kind == "duplicate":
        return duplicate_advice(op)
    if op.state == OperationState.UNKNOWN:
        if op.attention == "reference_not_stored":
            made = op.result.get("unconfirmed_external_id") or "the record it named"
            return (
                f"Open {made} in {system}. If it is this enquiry, complete by hand with that ID. "
                f"Do not retry: a retry would make a second record. Then fix {system} so it keeps "
                "the reference (manage.py check_integration says what is missing)."
            )
        if op.attention == "smtp_no_reply":
            message_id = (attempt_summary(op) or {}).get("message_id") or "its Message-ID"
            return (
                f"Ask the relay's administrator (its log) or the recipient whether {message_id} "
                "arrived. Arrived: complete by hand with the relay's queue id. Not there: retry "
                "(the same Message-ID, so a reader can tell a repeat). Do not retry first."
            )
        if kind == "lookup" and lookup_possible_now(op):
            return (
                f"Reconcile now: {system} could not be asked before{seen_at(last_lookup(op))}, "
                f"and can be now. {reconcile_help(op)}"
            )
        if kind == "lookup":
            return (
                f"Look in {system} by hand for reference {op.reference}. Found: complete "
                "by hand with its reference. Not there: retry (same idempotency key)."
            )
        return (
            f"Reconcile now: it asks {system} for the record by reference. "
            f"{_not_found_consequence(op)} Do not retry first: a blind retry could create a "
            "second record."
        )
    if op.state == OperationState.FAILED:
        if kind == "duplicate":
            return duplicate_advice(op)
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
        if kind == "internal":
            return (
                "Tell the maintainer: this is an error inside Handover, not the answer of "
                f"{system}. Nothing was sent, so once the cause is fixed a retry (same "
                "idempotency key) cannot duplicate anything."
            )
        if kind == "throttled":
            return (
                f"Wait until {system} accepts calls again (ask its owner how fast Handover may "
                "call, and set the integration's rate), then retry: nothing was accepted, so "
                "the same idempotency key cannot duplicate it."
            )
        return (
            f"Retry: {system} never accepted the request, so a retry with the same idempotency "
            "key cannot duplicate it. If it is down for everyone, pause the integration first."
        )
    if op.state == OperationState.CONFIRMED:
        return "Nothing is needed. If it should not have happened, propose a compensation."
    if op.state == OperationState.SUBMITTED:
        return "Wait: the worker's answer decides. If it stays here, the sweeper reconciles it."
    if op.state == OperationState.PROPOSED and _approved_by_revision(op):
        return (
            f"Nothing on the operation: it runs once a reviewer approves revision {op.revision} "
            "of the enquiry (Approve revision), and not before."
        )
    if op.state in (OperationState.PROPOSED, OperationState.APPROVED):
        return "Nothing yet: it runs when approved and when its integration is not paused."
    return "Nothing: this operation is finished."


def answers(enquiry, operations, journal, *, revision=None) -> Answers:
    ops = list(operations)
    writes = [op for op in ops if op.action in WRITE_ACTIONS]
    approved = enquiry.approved_revision
    crm = next((op for op in reversed(writes) if op.action == Action.CREATE_ENQUIRY), None)
    # The acknowledgement (the other messages to the resident have their own cards).
    notify = next(
        (
            op
            for op in reversed(writes)
            if op.action == Action.SEND_NOTICE
            and op.payload.get("template", "enquiry_received") == "enquiry_received"
        ),
        None,
    )
    state = enquiry.state

    if state in (EnquiryState.RECEIVED, EnquiryState.VALIDATED):
        trying = f"Check {enquiry.reference} and suggest a category, so a reviewer can look at it."
    elif state == EnquiryState.READY_FOR_REVIEW:
        trying = (
            f"Get revision {enquiry.current_revision} of {enquiry.reference} reviewed and "
            "approved; "
            "nothing is sent to the CRM before that."
        )
    elif state == EnquiryState.NEEDS_INFORMATION:
        trying = "Get the missing information from the customer before review continues."
    elif state == EnquiryState.REJECTED:
        trying = f"Nothing more: {enquiry.reference} was closed without delivery."
        if any(r.action == "intake.enquiry.withdraw" for r in journal):
            trying += " Its CRM write was cancelled after approval (see Outcome)."
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
            if row.action == "intake.enquiry.approve" and row.to_state == EnquiryState.APPROVED
        ),
        None,
    )
    steps = [
        Step("Received", "done", f"from {enquiry.source}, {when(enquiry.created_at)}"),
        Step(
            "Checked",
            "done"
            if EnquiryState.VALIDATED in done_states or state != EnquiryState.RECEIVED
            else "waiting",
        ),
    ]
    if state == EnquiryState.NEEDS_INFORMATION:
        steps.append(Step("Reviewed", "current", "waiting for the customer's information"))
    elif state == EnquiryState.REJECTED and not approved:
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
            Step(
                "Reviewed and approved",
                "current" if state == EnquiryState.READY_FOR_REVIEW else "waiting",
            )
        )
    for label, op in (("Written to the CRM", crm), ("Customer acknowledged", notify)):
        if op is None:
            steps.append(Step(label, "waiting"))
            continue
        status = {
            OperationState.CONFIRMED: "done",
            OperationState.UNKNOWN: "uncertain",
            OperationState.FAILED: "failed",
            OperationState.SUBMITTED: "current",
            OperationState.CANCELLED: "skipped",
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
        if op.state in (
            OperationState.UNKNOWN,
            OperationState.FAILED,
            OperationState.SUBMITTED,
        ) or (op.state == OperationState.CONFIRMED and op.action == Action.CREATE_ENQUIRY):
            safe.append(f"{action_label(op.action)}: {safe_now(op)}")
    if enquiry.receipt_pending and enquiry.receipt_failures:
        safe.insert(
            0,
            f"Its receipt work failed {enquiry.receipt_failures} time(s) inside Handover "
            f"(nothing was sent anywhere): {enquiry.receipt_error[:300]}. Fix the cause, then run "
            "python manage.py recover; see the runbook.",
        )
    if state == EnquiryState.READY_FOR_REVIEW:
        safe.insert(0, "Review it: approve, edit (a new revision), request information or reject.")
    elif state == EnquiryState.NEEDS_INFORMATION:
        safe.insert(0, "Wait for the customer; when they answer, mark the information received.")
    if (
        not safe
        and state
        in (EnquiryState.SUBMISSION_UNKNOWN, EnquiryState.SUBMITTED, EnquiryState.APPROVED)
        and crm
    ):
        # Waiting on a write that is queued or in flight: the worker's answer decides.
        safe = [f"{action_label(crm.action)}: {safe_now(crm)}"]
    if not safe:
        safe = ["Nothing is needed from a person right now."]
    records = [(system_name(op), records_at_destination(op)) for op in writes]
    records = [(system, found) for system, found in records if found]
    return Answers(
        trying=trying, steps=steps, finished=finished, changed=changed, safe=safe, records=records
    )


RUNBOOKS = {
    "unknown-outcome": "Outcome unknown (a timeout or a lost answer)",
    "reconciliation-queue": "The destination cannot be looked up",
    "duplicate-records": "More than one record at the destination",
    "destination-unavailable": "Destination unavailable (retries used up)",
    "invalid-request": "Refused as invalid (400/409/422)",
    "credentials-refused": "Credentials refused (401/403)",
    "notification-failed": "A message to a resident or an operator failed",
    "email-no-reply": "An e-mail went out and the relay never replied",
    "document-access": "A document cannot be read",
    "appointments-stale": "Appointment slots stale or unreadable",
    "needs-information": "Waiting for the customer's information",
    "unresolved-classification": "Classification unresolved",
    "receipt-pending": "Receipts not taken up by a worker, or failing",
    "pause-procedure": "Pausing and resuming an integration",
    "throttled": "Throttled by a destination (429 / Retry-After)",
    "internal-error": "An error inside Handover (not the destination)",
    "queue-owners": "Who owns which queue",
}


def runbook_for_operation(op) -> str | None:
    """The one runbook for the situation the operation is in now; None when nothing is wrong
    (proposed, approved, in flight, confirmed, cancelled)."""
    if op.state not in (OperationState.UNKNOWN, OperationState.FAILED):
        if op.held:
            return "pause-procedure"
        if op.state == OperationState.APPROVED and _failure_kind(op) == "throttled":
            return "throttled"  # asked to wait, not failed (ledger.limits)
        return None
    kind = _failure_kind(op)
    if kind == "internal":
        return "internal-error"
    if kind == "throttled":
        return "throttled"
    if op.action == Action.READ_APPOINTMENTS:
        return "appointments-stale"
    if op.attention == "access_denied" or op.action == Action.EXTRACT_DOCUMENT:
        return "document-access"
    if op.attention == "smtp_no_reply":
        return "email-no-reply"
    if op.action == Action.SEND_NOTICE and op.state == OperationState.FAILED:
        return "notification-failed"
    if op.state == OperationState.UNKNOWN and kind == "duplicate":
        return "duplicate-records"
    if op.state == OperationState.UNKNOWN:
        return "reconciliation-queue" if kind == "lookup" else "unknown-outcome"
    return {
        "lookup": "reconciliation-queue",
        "duplicate": "duplicate-records",
        "invalid": "invalid-request",
        "auth": "credentials-refused",
    }.get(kind, "destination-unavailable")


def runbook_for_enquiry(enquiry, operations=()) -> str | None:
    """The enquiry's runbook. Waiting on its CRM write, it is that write's runbook, so the page
    never names two for one situation."""
    if enquiry.state == EnquiryState.NEEDS_INFORMATION:
        return "needs-information"
    if enquiry.receipt_pending and enquiry.receipt_failures:
        return "receipt-pending"
    if enquiry.state in (
        EnquiryState.SUBMISSION_UNKNOWN,
        EnquiryState.SUBMITTED,
        EnquiryState.APPROVED,
    ):
        for op in reversed(list(operations)):
            if op.action == Action.CREATE_ENQUIRY and op.state in (
                OperationState.UNKNOWN,
                OperationState.FAILED,
            ):
                return runbook_for_operation(op)
        return "unknown-outcome" if enquiry.state == EnquiryState.SUBMISSION_UNKNOWN else None
    if enquiry.state == EnquiryState.READY_FOR_REVIEW and enquiry.category_id is None:
        return "unresolved-classification"
    return None


# --- what a person's action will do, and what it did ----------------------------------------


def _approved_by_revision(op) -> bool:
    from ledger.policies import policy_for

    try:
        return policy_for(op).approved_by_revision
    except KeyError:
        return False


def retry_advised(op) -> bool:
    """False where the page says not to retry (refused as invalid or duplicates): no Retry
    button there, not even a locked one. Decided from the operation's own columns where they
    say (so a queue page asks no query per row), else from its last attempt."""
    if op.attention in ("invalid", "payload_mismatch", "duplicate_records", "document_changed"):
        return False
    if op.attention:
        return True
    if hasattr(op, "last_attempt_outcome"):  # the queue page's annotation (recovery.queue.rows)
        outcome = op.last_attempt_outcome or op.last_error_class
        return outcome != "invalid"
    return _failure_kind(op) not in ("invalid", "duplicate")


def _not_found_consequence(op) -> str:
    integration = op.integration
    system = system_name(op)
    if integration is None:
        return "Not found: it is run again (a read, safe to repeat)."
    if not integration.supports_lookup:
        return (
            f"{sentence(system)} cannot be looked up: the operation waits in the reconciliation "
            "queue for a person and nothing is sent."
        )
    settle = integration.settle_delay_seconds
    after = f" once {settle:g} s have passed since the last attempt" if settle else ""
    if integration.supports_idempotency_key:
        return (
            f"If {system} has no such record, the write is sent again with the same idempotency "
            f"key{after}: that changes {system}."
        )
    return (
        f"If {system} has no such record on two look-ups{after}, the write is sent again with "
        f"the same reference ({system} ignores idempotency keys): that changes {system}."
    )


def reconcile_help(op) -> str:
    """What "Reconcile now" will do, before the click, from the integration's capabilities."""
    system = system_name(op)
    reference = op.payload.get("reference") or op.reference
    return (
        f"Asks {system} for the record by its reference {reference}. Found once: the operation "
        "is confirmed with that record. Found more than once: it waits for a person. "
        f"{_not_found_consequence(op)}"
    )


def lookup_possible_now(op) -> bool:
    """The destination could not be asked before (a 501, a 503), and its integration can be
    asked now (its capability, not paused, not throttled): a failed look-up is not the verdict."""
    integration = op.integration
    if op.state != OperationState.UNKNOWN or integration is None:
        return False
    if op.attention not in ("lookup_unavailable", "lookup_failed"):
        return False
    throttled = integration.throttled_until and integration.throttled_until > timezone.now()
    return integration.capabilities.lookup and not integration.paused and not throttled


def safe_steps(op) -> tuple[str, ...]:
    """The operation actions safe_now names as the step to take, in its order ("" none)."""
    kind = _failure_kind(op)
    if kind == "duplicate" or op.attention in ("reference_not_stored", "smtp_no_reply"):
        return (
            ("complete_by_hand", "retry")
            if op.attention == "smtp_no_reply"
            else ("complete_by_hand",)
        )
    if op.state == OperationState.UNKNOWN:
        if kind == "lookup" and not lookup_possible_now(op):
            return ("complete_by_hand", "retry")
        return ("reconcile",)
    if op.state == OperationState.FAILED and kind not in ("invalid", "internal"):
        return ("retry",)
    return ()


def cancel_label(op) -> str:
    """The Cancel button says what happens to the enquiry here, not only to the operation."""
    if op.ends_enquiry():
        return "Cancel and close the enquiry"
    if op.enquiry_id is None:
        return "Cancel"
    return f"Cancel (enquiry stays {op.enquiry.get_state_display()})"


def cancel_help(op) -> str:
    """What Cancel does here, said before the click: the operation's end and the enquiry's."""
    system = system_name(op)
    if op.ends_enquiry():
        text = (
            f"Stops this write for good, and closes {op.reference} as Rejected: its "
            "approved revision will never be delivered. That is the enquiry's outcome, shown "
            "with your reason. Nothing is sent; nothing at the destination is undone."
        )
        if op.unanswered_calls():
            text += (
                f" An earlier request got no answer, so {system} may hold a record for "
                f"{op.payload.get('reference') or op.reference}: look there first."
            )
        return text
    if op.action == Action.CREATE_ENQUIRY:
        state = op.enquiry.get_state_display()
        return (
            f"Stops this write for good. {op.enquiry.reference} stays {state}: it does not "
            "wait on this write (a later revision has its own). Nothing is sent; nothing at the "
            "destination is undone."
        )
    if op.enquiry_id is None:
        return (
            f"Stops this {action_label(op.action).lower()} for good. Nothing is sent; nothing at "
            f"{system} is undone."
        )
    return (
        f"Stops this {action_label(op.action).lower()} for good; {op.enquiry.reference} stays "
        f"{op.enquiry.get_state_display()}. Nothing is sent; nothing at {system} is undone."
    )


def outcome(enquiry, journal) -> str:
    """How a closed enquiry ended, with who decided, when and why ("" while it is open)."""
    if enquiry.state not in (EnquiryState.REJECTED, EnquiryState.CONFIRMED):
        return ""
    row = next(
        (
            r
            for r in reversed(journal)
            if r.subject_type == "intake.enquiry" and r.to_state == enquiry.state
        ),
        None,
    )
    if row is None:
        return ""
    who = row.actor.removeprefix("user:")
    at = when(row.at)
    if row.action == "intake.enquiry.withdraw":
        return (
            f"Rejected: {who} cancelled its delivery to the CRM at {at}, which closed it. "
            f"Reason: “{row.reason}”."
        )
    if enquiry.state == EnquiryState.REJECTED:
        return f"Rejected by {who} at {at}. Reason: “{row.reason}”."
    return f"Confirmed at {at} ({who})."
