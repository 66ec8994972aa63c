"""The drill's cases: one per row of the design's drill table (DESIGN.md, "The drill").

Each case sends real signed events to the real intake endpoint, lets real workers do the work,
injects the failure at the real destination (or kills the real worker), then checks the ledger
AND counts the destination's own records by reference. A case that ends with drill work left in
a person's queue resolves it afterwards as a person would (with a reason), so the console's
queue is not left full of drill items.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import requests

from harness.drill.results import CaseFailed, CaseResult
from harness.drill.runner import ACTOR, Drill
from intake.models import Document, Enquiry, EnquiryState, IntakeEvent, Suggestion
from intake.services import reject_enquiry, revise_enquiry
from ledger.models import Op, Operation
from ledger.queueing import live_tasks
from ledger.services import (
    backlog,
    cancel_operation,
    complete_by_hand,
    pause_integration,
    release_backlog,
    resume_integration,
    retry_operation,
)
from ledger.sweeper import sweep

S = EnquiryState
CONCURRENT_COPIES = 50
CLEANUP = "drill: case finished, resolving the drill's own item"


@dataclass(frozen=True)
class Spec:
    key: str
    name: str
    expected: str
    run: Callable[[Drill, CaseResult], None]
    needs_faults: bool = False
    # The integrations whose destination the case writes to or counts at (the report names
    # which destination each one was: against a real CRM, only the CRM is real).
    uses: tuple[str, ...] = ("crm",)


def _ready(d: Drill, case: CaseResult, **fields) -> Enquiry:
    """Send the case's event and wait for receipt work (suggestion, acknowledgement) to finish."""
    enquiry = d.send(case, **fields)
    d.wait_enquiry(enquiry, S.READY_FOR_REVIEW)
    d.settle(enquiry)
    return enquiry


def _deliver(d: Drill, case: CaseResult, enquiry, actor=None) -> Operation:
    op = d.approve(enquiry, actor=actor)
    op = d.wait_operation(op, lambda o: o.state == Op.CONFIRMED, "the CRM write to be confirmed")
    d.wait_enquiry(enquiry, S.CONFIRMED)
    return op


def _calls(d: Drill, before) -> int | None:
    """Create calls since ``before`` (None: this destination does not count its requests)."""
    now = d.destination.requests_to("crm.create")
    return None if now is None or before is None else now - before


# --- the cases ----------------------------------------------------------------------------------


def valid_new_event(d: Drill, case: CaseResult):
    enquiry = _ready(d, case)
    op = _deliver(d, case, enquiry)
    count = d.records(case, enquiry)
    case.note(f"enquiry {enquiry.state}, CRM operation {op.state} ({op.external_id})")
    case.check(IntakeEvent.objects.filter(enquiry=enquiry).count() == 1, "one intake event")
    case.check(op.external_id, "the CRM's record ID saved")
    case.check(count == 1, "one destination record", f"{count} records")


def duplicate_deliveries(d: Drill, case: CaseResult):
    body = d.body(d.payload(case.key))
    first = d.post(case.input_reference, body)
    second = d.post(case.input_reference, body)
    case.note(f"twice: {first[0]} then {second[0]}")
    case.check(first[0] == 202, "first delivery accepted (202)", first[0])
    case.check(
        second[0] == 200 and second[1].get("reference") == first[1].get("reference"),
        "second delivery answered with the existing result (200, same reference)",
        second,
    )

    burst_id = case.input_reference + "-x50"
    burst_body = d.body(d.payload(case.key + "-x50"))
    barrier = threading.Barrier(CONCURRENT_COPIES, timeout=30)

    def deliver(_):
        with requests.Session() as session:
            session.trust_env = False
            barrier.wait()
            return d.post(burst_id, burst_body, session=session)

    with ThreadPoolExecutor(max_workers=CONCURRENT_COPIES) as pool:
        answers = list(pool.map(deliver, range(CONCURRENT_COPIES)))
    statuses = sorted(status for status, _ in answers)
    references = {answer.get("reference") for _, answer in answers}
    case.note(
        f"{CONCURRENT_COPIES} at once: {statuses.count(202)}x202, {statuses.count(200)}x200, "
        f"other {[s for s in statuses if s not in (200, 202)]}"
    )
    case.check(statuses.count(202) == 1, "exactly one of the 50 accepted as new", statuses)
    case.check(set(statuses) <= {200, 202}, "every copy answered 200 or 202", statuses)
    case.check(len(references) == 1, "every copy names the same enquiry", references)

    enquiries = []
    for event_id in (case.input_reference, burst_id):
        events = IntakeEvent.objects.filter(source="drill", event_id=event_id)
        case.check(events.count() == 1, f"one stored event for {event_id}", events.count())
        enquiries.append(events.first().enquiry)
    burst_event = IntakeEvent.objects.get(source="drill", event_id=burst_id)
    case.check(
        burst_event.deliveries == CONCURRENT_COPIES,
        "all 50 deliveries counted on the one event",
        burst_event.deliveries,
    )
    case.enquiry_reference = ", ".join(e.reference for e in enquiries)

    for enquiry in enquiries:
        d.wait_enquiry(enquiry, S.READY_FOR_REVIEW)
        d.settle(enquiry)
        d.approve(enquiry)
    for enquiry in enquiries:
        d.wait_enquiry(enquiry, S.CONFIRMED)
    # Delivered again after the write: the stored answer, and still no second record.
    again = d.post(case.input_reference, body)
    d.settle(enquiries[0])
    counts = [d.destination.records(e.reference) for e in enquiries]
    case.destination_records = sum(counts)
    case.note(f"both confirmed; records per enquiry {counts}; re-delivery after: {again[0]}")
    case.check(again[0] == 200, "a delivery after the write is answered 200", again[0])
    case.check(counts == [1, 1], "one destination record per event", counts)


def invalid_fields(d: Drill, case: CaseResult):
    payload = d.payload(case.key, email="not-an-address", consent=False)
    status, answer = d.post(case.input_reference, d.body(payload))
    errors = answer.get("errors", {})
    case.note(f"intake {status}, errors for {sorted(errors)}")
    case.check(status == 422, "422", status)
    case.check(
        {"email", "consent"} <= set(errors) and all(errors[k] for k in ("email", "consent")),
        "field-level messages for email and consent",
        errors,
    )
    stored = d.stored_event(case.input_reference)
    drill_enquiries = Enquiry.objects.filter(source="drill", subject__contains=case.key).count()
    case.check(stored is None, "no event stored")
    case.check(drill_enquiries == 0, "no enquiry stored", drill_enquiries)
    case.destination_records = 0
    case.note("nothing stored")


def destination_unavailable(d: Drill, case: CaseResult):
    enquiry = _ready(d, case)
    crm = d.crm_operation(enquiry)
    budget = 2 if crm is None or crm.integration is None else crm.integration.retry_budget
    d.destination.fault("crm.create", "error_503", count=budget + 5)
    op = d.approve(enquiry)
    op = d.wait_operation(op, lambda o: o.state == Op.FAILED, "the CRM write to fail")
    d.destination.clear_faults()
    enquiry.refresh_from_db()
    calls = op.attempts.filter(kind="call").count()
    queue = d.queue_row("operation", op.pk)
    count = d.records(case, enquiry)
    case.note(
        f"CRM operation failed ({op.attention}) after {calls} calls; enquiry {enquiry.state}; "
        f"queue: {queue}; owner: {op.owner or 'queue policy'}"
    )
    case.check(d.stored_event(case.input_reference) is not None, "intake kept")
    case.check(
        enquiry.state == S.APPROVED, "enquiry recoverable (approved, not lost)", enquiry.state
    )
    case.check(calls == budget, f"bounded retries ({budget} calls)", calls)
    case.check(op.attention == "retry_budget_exhausted", "marked retry budget exhausted")
    case.check(queue == "failed", "visible in the queue", queue)
    case.check(count == 0, "no destination record", count)
    cancel_operation(op.pk, actor=d.reviewer, reason=CLEANUP)


def timeout_after_commit(d: Drill, case: CaseResult):
    enquiry = _ready(d, case)
    before = d.destination.requests_to("crm.create")
    d.destination.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    op = d.approve(enquiry)
    op = d.wait_operation(op, lambda o: o.state == Op.CONFIRMED, "reconciled to confirmed")
    enquiry = d.wait_enquiry(enquiry, S.CONFIRMED)
    outcomes = list(op.attempts.order_by("number").values_list("kind", "outcome"))
    went_unknown = op.enquiry.journal.filter(subject_id=str(op.pk), to_state=Op.UNKNOWN).exists()
    calls = d.destination.requests_to("crm.create") - before
    count = d.records(case, enquiry)
    case.note(f"attempts {outcomes}; enquiry {enquiry.state}; {calls} create call(s)")
    case.check(went_unknown, "the timeout made the operation unknown (journal)")
    case.check(
        outcomes[:1] == [("call", "uncertain")] and outcomes[-1] == ("lookup", "found"),
        "reconciled by lookup, not by a second send",
        outcomes,
    )
    case.check(calls == 1, "one create call", calls)
    case.check(count == 1, "one destination record", count)


def worker_killed(d: Drill, case: CaseResult):
    enquiry = _ready(d, case)
    before = d.destination.requests_to("crm.create")
    op = None
    for _attempt in range(3):
        d.stop_cluster()
        crashing = d.start_cluster(failpoints=["after_call_succeeded"])
        if op is None:
            op = d.approve(enquiry)
        if crashing.wait_exit(timeout=60) is None:
            raise CaseFailed("the cluster armed with after_call_succeeded did not crash in 60s")
        op.refresh_from_db()
        if op.state == Op.SUBMITTED:
            break  # our write was the one in flight when the process group died
        case.note(f"the cluster crashed on other work first (ours {op.state}); again")
    case.check("FAILPOINT after_call_succeeded" in crashing.log(), "the worker was killed")
    case.check(op.state == Op.SUBMITTED, "left in flight by the crash", op.state)
    at_crash = d.destination.records(enquiry.reference)
    case.check(at_crash == 1, "the remote write had succeeded", at_crash)
    restarted = d.start_cluster()
    op = d.wait_operation(
        op, lambda o: o.state == Op.CONFIRMED, f"reconciled on restart\n{restarted.log(1500)}"
    )
    enquiry = d.wait_enquiry(enquiry, S.CONFIRMED)
    outcomes = list(op.attempts.order_by("number").values_list("outcome", flat=True))
    calls = _calls(d, before)
    count = d.records(case, enquiry)
    case.note(
        f"killed after the CRM answered ({at_crash} record); restarted; attempts {outcomes}; "
        f"{calls} create call(s); enquiry {enquiry.state}"
    )
    case.check(outcomes[-1] == "found", "reconciled by lookup", outcomes)
    case.check(calls in (1, None), "never sent again", calls)
    case.check(count == 1, "one destination record", count)


def lookup_unavailable(d: Drill, case: CaseResult):
    enquiry = _ready(d, case)
    before = d.destination.requests_to("crm.create")
    d.destination.capabilities(lookup=False)
    d.destination.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    op = d.approve(enquiry)
    op = d.wait_operation(
        op,
        lambda o: o.state == Op.UNKNOWN and o.attention,
        "the operation to wait for a person",
    )
    enquiry.refresh_from_db()
    outcomes = list(op.attempts.order_by("number").values_list("kind", "outcome"))
    queue = d.queue_row("operation", op.pk)
    calls = d.destination.requests_to("crm.create") - before
    count = d.records(case, enquiry)
    case.note(
        f"operation {op.state} ({op.attention}); attempts {outcomes}; enquiry {enquiry.state}; "
        f"queue: {queue}; {calls} create call(s)"
    )
    case.check(op.attention == "lookup_unavailable", "reconciliation queue (lookup unavailable)")
    case.check(queue == "unknown", "visible in the queue", queue)
    case.check(calls == 1, "not retried", calls)
    case.check(enquiry.state == S.SUBMISSION_UNKNOWN, "enquiry submission unknown", enquiry.state)
    case.check(count == 1, "one destination record (the timed-out write)", count)
    # A person checks the CRM by hand and completes it with the record's ID.
    d.destination.capabilities(lookup=True)
    found = d.destination.crm_records(enquiry.reference)
    if found:
        complete_by_hand(op.pk, actor=ACTOR, reason=CLEANUP, external_id=found[0]["id"])


def document_access_removed(d: Drill, case: CaseResult):
    doc_id = f"drill-{d.run_id}-doc"
    version = d.destination.put_document(doc_id, {"fields": {"permit": "DRILL-PERMIT-1"}})
    d.destination.set_doc_access(doc_id, False)
    enquiry = d.send(case, documents=[{"id": doc_id, "version": version}])
    d.wait_enquiry(enquiry, S.READY_FOR_REVIEW)
    op = d.operation(enquiry, "documents.extract")
    if op is None:
        raise CaseFailed("no documents.extract operation was proposed")
    op = d.wait_operation(op, lambda o: o.state in (Op.FAILED, Op.CONFIRMED), "the extraction")
    d.settle(enquiry)
    document = Document.objects.get(enquiry=enquiry, document_id=doc_id)
    revision = enquiry.revisions.order_by("-number").first()
    queue = d.queue_row("operation", op.pk)
    case.destination_records = d.destination.records(enquiry.reference)
    case.note(
        f"extraction {op.state} ({op.attention}); document {document.status}, "
        f"extracted {document.extracted}; revision r{revision.number}; queue: {queue}"
    )
    case.check(op.state == Op.FAILED and op.attention == "access_denied", "an access failure")
    case.check(document.status == "access_denied", "the document marked access denied")
    case.check(document.extracted == {}, "no invented fields", document.extracted)
    case.check(
        revision.number == 1 and "permit" not in revision.fields,
        "the revision is untouched",
        revision.fields,
    )
    case.check(queue == "failed", "visible in the queue", queue)
    cancel_operation(op.pk, actor=ACTOR, reason=CLEANUP)
    reject_enquiry(enquiry.pk, actor=d.editor, reason=CLEANUP)


def changed_after_approval(d: Drill, case: CaseResult):
    enquiry = _ready(d, case)
    before = d.destination.requests_to("crm.create")
    # No worker may run between the approval and the edit: stop the cluster for that moment.
    d.stop_cluster()
    try:
        first = d.approve(enquiry)
        revise_enquiry(
            enquiry.pk,
            actor=d.editor,
            reason="drill: the resident phoned with a correction",
            fields={"subject": f"[drill {d.run_id}] corrected"},
        )
    finally:
        d.start_cluster()
    first.refresh_from_db()
    enquiry.refresh_from_db()
    second = d.crm_operation(enquiry, revision=2)
    case.note(
        f"r1 write {first.state}; enquiry {enquiry.state} at r{enquiry.current_revision}; "
        f"r2 write {second.state if second else 'none'}"
    )
    case.check(first.state == Op.CANCELLED, "the approved r1 write cancelled", first.state)
    case.check(enquiry.state == S.READY_FOR_REVIEW, "back to review", enquiry.state)
    case.check(enquiry.approved_revision is None, "the approval did not carry over")
    case.check(second is not None and second.state == Op.PROPOSED, "r2 waits for a reviewer")
    # The r1 task (queued with the approval) runs and finds nothing to claim.
    d.wait(lambda: str(first.pk) not in (live_tasks() or {}), "the stale r1 task to be consumed")
    case.check(
        d.destination.records(enquiry.reference) == 0, "nothing written before the new review"
    )
    op = _deliver(d, case, enquiry)
    records = d.destination.crm_records(enquiry.reference)
    calls = _calls(d, before)
    case.destination_records = len(records)
    sent = records[0]["data"].get("revision") if records else None
    case.note(f"after the review of r2: {op.state}, record carries r{sent}, {calls} call(s)")
    case.check(len(records) == 1 and sent == 2, "one record, of revision 2", records)
    case.check(calls in (1, None), "one create call", calls)


def uncertain_classification(d: Drill, case: CaseResult):
    enquiry = _ready(d, case, message="Zqxv wuplo frint; drill text that names no service at all.")
    suggestion = Suggestion.objects.filter(enquiry=enquiry).order_by("-created_at").first()
    queue = d.queue_row("enquiry", enquiry.reference)
    case.destination_records = d.destination.records(enquiry.reference)
    case.note(
        f"suggestion {suggestion.label if suggestion else 'none'} "
        f"({suggestion.validation if suggestion else '-'}); enquiry {enquiry.state}, "
        f"category {enquiry.category or 'none'}; queue: {queue}"
    )
    case.check(suggestion is not None and suggestion.unresolved, "classified unresolved")
    case.check(enquiry.category_id is None, "no category guessed")
    case.check(queue == "unresolved_classification", "in the review queue", queue)
    case.check(case.destination_records == 0, "nothing written", case.destination_records)
    reject_enquiry(enquiry.pk, actor=d.editor, reason=CLEANUP)


def notification_fails(d: Drill, case: CaseResult):
    d.destination.fault("notify.send", "error_503", count=10)
    enquiry = d.send(case)
    d.wait_enquiry(enquiry, S.READY_FOR_REVIEW)
    notify = d.operation(enquiry, "notify.send")
    if notify is None:
        raise CaseFailed("no acknowledgement was proposed")
    d.wait_operation(notify, lambda o: o.state == Op.FAILED, "the acknowledgement to fail")
    d.destination.clear_faults()
    op = _deliver(d, case, enquiry)
    notify.refresh_from_db()
    count = d.records(case, enquiry)
    messages = d.destination.notify_records(enquiry.reference)
    queue = d.queue_row("operation", notify.pk)
    case.note(
        f"CRM {op.state} ({count} record); notification {notify.state} ({notify.attention}), "
        f"{messages} message(s); queue: {queue}"
    )
    case.check(count == 1, "one CRM record", count)
    case.check(notify.state == Op.FAILED, "the notification open on its own", notify.state)
    case.check(queue == "failed", "the notification visible in the queue", queue)
    case.check(messages == 0, "no message sent", messages)
    # Retried on its own: the CRM write is not repeated.
    retry_operation(notify.pk, actor=ACTOR, reason=CLEANUP)
    d.wait_operation(notify, lambda o: o.state == Op.CONFIRMED, "the retried notification")
    after = d.destination.records(enquiry.reference)
    case.note(f"notification retried: {notify.state}; CRM records still {after}")
    case.check(after == 1, "retrying the notification did not touch the CRM", after)


def category_corrected(d: Drill, case: CaseResult):
    first_category, corrected = d.categories[0], d.categories[1]
    enquiry = _ready(d, case)
    revise_enquiry(
        enquiry.pk,
        actor=d.editor,
        reason="drill: set the category",
        fields={},
        category=first_category,
    )
    d.destination.fault("crm.create", "error_503", count=10)
    failed = d.approve(enquiry)
    failed = d.wait_operation(failed, lambda o: o.state == Op.FAILED, "the first write to fail")
    d.destination.clear_faults()
    revise_enquiry(
        enquiry.pk,
        actor=d.editor,
        reason="drill: the category was wrong",
        fields={},
        category=corrected,
    )
    failed.refresh_from_db()
    case.check(failed.state == Op.CANCELLED, "the failed write of the old revision cancelled")
    op = _deliver(d, case, enquiry)
    records = d.destination.crm_records(enquiry.reference)
    case.destination_records = len(records)
    data = records[0]["data"] if records else {}
    case.note(
        f"r{failed.revision} write failed then {failed.state}; r{op.revision} {op.state}; record "
        f"category {data.get('category')!r}, revision {data.get('revision')}"
    )
    case.check(len(records) == 1, "one destination record", len(records))
    case.check(data.get("category") == corrected.slug, "the corrected category was sent", data)
    case.check(data.get("revision") == op.revision == 3, "the approved revision (3) was sent")


def integration_paused(d: Drill, case: CaseResult):
    pause_integration("crm", actor=ACTOR, reason="drill: pause")
    try:
        enquiry = _ready(d, case)
        op = d.approve(enquiry)
        # Give the workers (and a sweep, which re-enqueues approved work) every chance to send.
        time.sleep(1.0)
        sweep(actor=ACTOR)
        d.settle(enquiry)
        op.refresh_from_db()

        in_backlog = backlog("crm").filter(pk=op.pk).exists()
        queue = d.queue_row("integration", "crm")
        held_records = d.destination.records(enquiry.reference)
        case.note(
            f"intake kept ({enquiry.reference}); write {op.state}, held {op.held}; "
            f"{held_records} record(s); queue: {queue}"
        )
        case.check(d.stored_event(case.input_reference) is not None, "intake kept")
        case.check(op.state == Op.APPROVED and op.held, "the write held", op.state)
        case.check(held_records == 0, "no writes while paused", held_records)
        case.check(in_backlog, "in the visible backlog")
        case.check(queue == "paused_backlog", "the paused integration in the queue", queue)
    finally:
        resume_integration("crm", actor=ACTOR, reason="drill: resume")
    op.refresh_from_db()
    still = d.destination.records(enquiry.reference)
    case.check(op.held and still == 0, "resuming does not release unreviewed work", still)
    release_backlog("crm", actor=ACTOR, reason="drill: backlog reviewed", operation_ids=[op.pk])
    d.wait_operation(op, lambda o: o.state == Op.CONFIRMED, "the released write")
    count = d.records(case, enquiry)
    case.note(f"resumed; backlog reviewed and released: {op.state}, {count} record")
    case.check(count == 1, "one destination record after release", count)


CASES = [
    Spec(
        "valid",
        "valid new event",
        "one intake, one acknowledged destination record",
        valid_new_event,
    ),
    Spec(
        "duplicate",
        "same event delivered twice (and 50 times at once)",
        "the existing result; one destination record",
        duplicate_deliveries,
    ),
    Spec(
        "invalid",
        "invalid fields",
        "422 with actionable errors; nothing stored as an enquiry",
        invalid_fields,
    ),
    Spec(
        "unavailable",
        "destination unavailable",
        "intake kept; recoverable state; bounded retries; visible in queue",
        destination_unavailable,
        needs_faults=True,
    ),
    Spec(
        "timeout",
        "timeout after the destination committed",
        "unknown, reconciled to confirmed; one record",
        timeout_after_commit,
        needs_faults=True,
    ),
    Spec(
        "killed",
        "worker killed after the remote write succeeded",
        "reconciled on restart; one record",
        worker_killed,
    ),
    Spec(
        "no-lookup",
        "destination cannot be looked up",
        "reconciliation queue, not a retry",
        lookup_unavailable,
        needs_faults=True,
    ),
    Spec(
        "doc-access",
        "document access removed",
        "access failure; no invented fields",
        document_access_removed,
        needs_faults=True,
        uses=("documents", "crm"),
    ),
    Spec(
        "changed",
        "enquiry changed after approval",
        "renewed review before any write",
        changed_after_approval,
    ),
    Spec("uncertain", "uncertain classification", "review queue", uncertain_classification),
    Spec(
        "notify-fails",
        "CRM succeeds, notification fails",
        "one CRM record; notification open separately",
        notification_fails,
        needs_faults=True,
        uses=("crm", "notify"),
    ),
    Spec(
        "corrected",
        "category corrected before a retry",
        "the retry sends the corrected, approved revision",
        category_corrected,
        needs_faults=True,
    ),
    Spec(
        "paused",
        "integration paused",
        "intake kept, no writes, backlog visible; resume reviews it",
        integration_paused,
        needs_faults=True,
    ),
]
