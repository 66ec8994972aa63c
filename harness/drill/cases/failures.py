"""The drill's cases where a destination or a worker fails: unavailable, a timeout after the
commit, a worker killed after the write, no look-up, a failing notification (documents:
harness.drill.cases.documents)."""

from __future__ import annotations

from harness.drill.cases.steps import (
    CLEANUP,
    create_calls_since,
    deliver_to_crm,
    ready_for_review,
)
from harness.drill.results import CaseFailed, CaseResult
from harness.drill.runner import ACTOR, Drill
from intake.models import EnquiryState
from ledger.models import Action, Operation, OperationState
from ledger.services import cancel_operation, complete_by_hand, retry_operation


def destination_unavailable(d: Drill, case: CaseResult):
    enquiry = ready_for_review(d, case)
    crm = d.crm_operation(enquiry)
    budget = 2 if crm is None or crm.integration is None else crm.integration.retry_budget
    d.destination.fault("crm.create", "error_503", count=budget + 5)
    op = d.approve(enquiry)
    op = d.wait_operation(op, lambda o: o.state == OperationState.FAILED, "the CRM write to fail")
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
        enquiry.state == EnquiryState.APPROVED,
        "enquiry recoverable (approved, not lost)",
        enquiry.state,
    )
    case.check(calls == budget, f"bounded retries ({budget} calls)", calls)
    case.check(op.attention == "retry_budget_exhausted", "marked retry budget exhausted")
    case.check(queue == "failed", "visible in the queue", queue)
    case.check(count == 0, "no destination record", count)
    cancel_operation(op.pk, actor=d.reviewer, reason=CLEANUP)


def timeout_after_commit(d: Drill, case: CaseResult):
    enquiry = ready_for_review(d, case)
    before = d.destination.requests_to("crm.create")
    d.destination.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    op = d.approve(enquiry)
    op = d.wait_operation(
        op, lambda o: o.state == OperationState.CONFIRMED, "reconciled to confirmed"
    )
    enquiry = d.wait_enquiry(enquiry, EnquiryState.CONFIRMED)
    outcomes = list(op.attempts.order_by("number").values_list("kind", "outcome"))
    went_unknown = op.enquiry.journal.filter(
        subject_id=str(op.pk), to_state=OperationState.UNKNOWN
    ).exists()
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
    enquiry = ready_for_review(d, case)
    before = d.destination.requests_to("crm.create")
    d.stop_cluster()
    # Armed for this enquiry's CRM write alone (its key is known before approval): other work
    # the cluster does first (a suggestion, an acknowledgement) never trips it.
    key = Operation.make_key(enquiry.pk, Action.CREATE_ENQUIRY, enquiry.current_revision)
    crashing = d.start_cluster(failpoints=[f"after_call_succeeded@{key}"])
    op = d.approve(enquiry)
    if crashing.wait_exit(timeout=60) is None:
        raise CaseFailed("the cluster armed with after_call_succeeded did not crash in 60s")
    op.refresh_from_db()
    case.check(op.idempotency_key == key, "the armed key is the write's", op.idempotency_key)
    case.check("FAILPOINT after_call_succeeded" in crashing.log(), "the worker was killed")
    case.check(op.state == OperationState.SUBMITTED, "left in flight by the crash", op.state)
    at_crash = d.destination.records(enquiry.reference)
    case.check(at_crash == 1, "the remote write had succeeded", at_crash)
    restarted = d.start_cluster()
    op = d.wait_operation(
        op,
        lambda o: o.state == OperationState.CONFIRMED,
        f"reconciled on restart\n{restarted.log(1500)}",
    )
    enquiry = d.wait_enquiry(enquiry, EnquiryState.CONFIRMED)
    outcomes = list(op.attempts.order_by("number").values_list("outcome", flat=True))
    calls = create_calls_since(d, before)
    count = d.records(case, enquiry)
    case.note(
        f"killed after the CRM answered ({at_crash} record); restarted; attempts {outcomes}; "
        f"{calls} create call(s); enquiry {enquiry.state}"
    )
    case.check(outcomes[-1] == "found", "reconciled by lookup", outcomes)
    case.check(calls in (1, None), "never sent again", calls)
    case.check(count == 1, "one destination record", count)


def lookup_unavailable(d: Drill, case: CaseResult):
    enquiry = ready_for_review(d, case)
    before = d.destination.requests_to("crm.create")
    d.destination.capabilities(lookup=False)
    d.destination.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    op = d.approve(enquiry)
    op = d.wait_operation(
        op,
        lambda o: o.state == OperationState.UNKNOWN and o.attention,
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
    case.check(
        enquiry.state == EnquiryState.SUBMISSION_UNKNOWN,
        "enquiry submission unknown",
        enquiry.state,
    )
    case.check(count == 1, "one destination record (the timed-out write)", count)
    # A person checks the CRM by hand and completes it with the record's ID.
    d.destination.capabilities(lookup=True)
    found = d.destination.crm_records(enquiry.reference)
    if found:
        complete_by_hand(op.pk, actor=ACTOR, reason=CLEANUP, external_id=found[0]["id"])


def notification_fails(d: Drill, case: CaseResult):
    d.destination.fault(Action.SEND_NOTICE, "error_503", count=10)
    enquiry = d.send(case)
    d.wait_enquiry(enquiry, EnquiryState.READY_FOR_REVIEW)
    notify = d.operation(enquiry, Action.SEND_NOTICE)
    if notify is None:
        raise CaseFailed("no acknowledgement was proposed")
    d.wait_operation(
        notify, lambda o: o.state == OperationState.FAILED, "the acknowledgement to fail"
    )
    d.destination.clear_faults()
    op = deliver_to_crm(d, case, enquiry)
    notify.refresh_from_db()
    count = d.records(case, enquiry)
    passed_on = Operation.objects.filter(enquiry=enquiry, payload__template="passed_on").first()
    if passed_on is not None:
        d.wait_operation(
            passed_on, lambda o: o.state == OperationState.CONFIRMED, "the passed-on message"
        )
    messages = d.destination.notify_records(enquiry.reference)
    queue = d.queue_row("operation", notify.pk)
    case.note(
        f"CRM {op.state} ({count} record); acknowledgement {notify.state} ({notify.attention}); "
        f"passed-on message {passed_on.state if passed_on else 'none'}; {messages} message(s); "
        f"queue: {queue}"
    )
    case.check(count == 1, "one CRM record", count)
    case.check(
        notify.state == OperationState.FAILED, "the notification open on its own", notify.state
    )
    case.check(queue == "failed", "the notification visible in the queue", queue)
    case.check(passed_on is not None, "the resident told it was passed on", passed_on)
    case.check(messages == 1, "one message sent: the passed-on one", messages)
    # Retried after delivery, the acknowledgement ("nobody has read it yet") is no longer true:
    # it is cancelled with its reason, not sent; the CRM write is not repeated.
    retry_operation(notify.pk, actor=ACTOR, reason=CLEANUP)
    d.wait_operation(
        notify, lambda o: o.state == OperationState.CANCELLED, "the retried acknowledgement"
    )
    after = d.destination.records(enquiry.reference)
    sent = d.destination.notify_records(enquiry.reference)
    case.note(f"acknowledgement retried: {notify.state}; CRM records still {after}")
    case.check(after == 1, "retrying the notification did not touch the CRM", after)
    case.check(sent == 1, "the outdated acknowledgement was not sent", sent)
