"""The drill's cases where a person changes things while work is under way: an enquiry edited
after approval, a category corrected before a retry, an integration paused."""

from __future__ import annotations

import time

from harness.drill.cases.steps import create_calls_since, deliver_to_crm, ready_for_review
from harness.drill.results import CaseResult
from harness.drill.runner import ACTOR, Drill
from intake.models import EnquiryState
from intake.services import revise_enquiry
from ledger.models import OperationState
from ledger.queueing import live_tasks
from ledger.services import backlog, pause_integration, release_backlog, resume_integration
from ledger.sweeper import sweep


def changed_after_approval(d: Drill, case: CaseResult):
    enquiry = ready_for_review(d, case)
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
    case.check(
        first.state == OperationState.CANCELLED, "the approved r1 write cancelled", first.state
    )
    case.check(enquiry.state == EnquiryState.READY_FOR_REVIEW, "back to review", enquiry.state)
    case.check(enquiry.approved_revision is None, "the approval did not carry over")
    case.check(
        second is not None and second.state == OperationState.PROPOSED, "r2 waits for a reviewer"
    )
    # The r1 task (queued with the approval) runs and finds nothing to claim.
    d.wait(lambda: str(first.pk) not in (live_tasks() or {}), "the stale r1 task to be consumed")
    case.check(
        d.destination.records(enquiry.reference) == 0, "nothing written before the new review"
    )
    op = deliver_to_crm(d, case, enquiry)
    records = d.destination.crm_records(enquiry.reference)
    calls = create_calls_since(d, before)
    case.destination_records = len(records)
    sent = records[0]["data"].get("revision") if records else None
    case.note(f"after the review of r2: {op.state}, record carries r{sent}, {calls} call(s)")
    case.check(len(records) == 1 and sent == 2, "one record, of revision 2", records)
    case.check(calls in (1, None), "one create call", calls)


def category_corrected(d: Drill, case: CaseResult):
    first_category, corrected = d.categories[0], d.categories[1]
    enquiry = ready_for_review(d, case)

    def categorise(category, reason):
        revise_enquiry(enquiry.pk, actor=d.editor, reason=reason, fields={}, category=category)

    categorise(first_category, "drill: set the category")
    d.destination.fault("crm.create", "error_503", count=10)
    failed = d.approve(enquiry)
    failed = d.wait_operation(
        failed, lambda o: o.state == OperationState.FAILED, "the first write to fail"
    )
    d.destination.clear_faults()
    categorise(corrected, "drill: the category was wrong")
    failed.refresh_from_db()
    case.check(
        failed.state == OperationState.CANCELLED, "the failed write of the old revision cancelled"
    )
    op = deliver_to_crm(d, case, enquiry)
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
        enquiry = ready_for_review(d, case)
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
        case.check(op.state == OperationState.APPROVED and op.held, "the write held", op.state)
        case.check(held_records == 0, "no writes while paused", held_records)
        case.check(in_backlog, "in the visible backlog")
        case.check(queue == "paused_backlog", "the paused integration in the queue", queue)
    finally:
        resume_integration("crm", actor=ACTOR, reason="drill: resume")
    op.refresh_from_db()
    still = d.destination.records(enquiry.reference)
    case.check(op.held and still == 0, "resuming does not release unreviewed work", still)
    release_backlog("crm", actor=ACTOR, reason="drill: backlog reviewed", operation_ids=[op.pk])
    d.wait_operation(op, lambda o: o.state == OperationState.CONFIRMED, "the released write")
    count = d.records(case, enquiry)
    case.note(f"resumed; backlog reviewed and released: {op.state}, {count} record")
    case.check(count == 1, "one destination record after release", count)
