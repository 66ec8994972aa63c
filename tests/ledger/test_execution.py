"""The engine, run in this process against the real sandbox: each outcome row of the design,
asserted on the ledger, the enquiry and the destination's own record count. The answers to a
write that timed out, beyond the end-to-end ones here, are in test_execution_fake.py (the
destination at ``ledger.http.send``, no real timeout waited out)."""

from intake.models import EnquiryState
from ledger import tasks
from ledger.models import JournalEntry, Operation, OperationState
from recovery.ownership import item_owner
from tests.ledger.conftest import crm_records


def state_is(op, *states):
    def check():
        op.refresh_from_db()
        return op.state in states

    return check


def test_approved_write_is_confirmed_with_the_destination_reference(
    approved_enquiry, sandbox, run_queue
):
    enquiry, op = approved_enquiry()
    assert op.state == OperationState.APPROVED
    assert op.idempotency_key == f"{enquiry.pk}:crm.create_enquiry:r1"
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert op.external_id.startswith("crm_")
    assert crm_records(sandbox, enquiry.reference) == 1
    attempt = op.attempts.get()
    assert (attempt.kind, attempt.outcome, attempt.response_status) == ("call", "success", 201)
    assert attempt.worker.startswith("system:worker-")
    transitions = list(
        JournalEntry.objects.filter(subject_id=str(op.pk)).values_list("from_state", "to_state")
    )
    assert ("approved", "submitted") in transitions
    assert ("submitted", "confirmed") in transitions


def test_a_second_delivery_of_the_task_finds_nothing_to_claim(approved_enquiry, sandbox, run_queue):
    _enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    assert tasks.execute_operation(str(op.pk)) == "nothing to claim"
    assert crm_records(sandbox) == 1
    assert sandbox.stats()["requests"]["crm.create"] == 1
    assert op.attempts.count() == 1


def test_timeout_after_commit_is_unknown_then_reconciled_to_one_record(
    approved_enquiry, sandbox, run_queue
):
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.UNKNOWN, OperationState.CONFIRMED))
    enquiry.refresh_from_db()
    assert op.state == OperationState.UNKNOWN
    assert enquiry.state == EnquiryState.SUBMISSION_UNKNOWN
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert crm_records(sandbox, enquiry.reference) == 1
    assert sandbox.stats()["requests"]["crm.create"] == 1  # no second POST
    kinds = list(op.attempts.values_list("kind", "outcome"))
    assert kinds == [("call", "uncertain"), ("lookup", "found")]


def test_transient_errors_retry_with_backoff_then_fail(approved_enquiry, sandbox, run_queue):
    sandbox.fault("crm.create", "error_503", count=5)
    enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.FAILED))
    enquiry.refresh_from_db()
    assert op.attention == "retry_budget_exhausted"
    assert op.attempts.count() == 3  # the integration's budget
    assert sandbox.stats()["requests"]["crm.create"] == 3
    assert crm_records(sandbox) == 0
    assert enquiry.state == EnquiryState.APPROVED  # the approved revision waits for a person
    delays = [
        row.evidence["delay_seconds"]
        for row in JournalEntry.objects.filter(
            subject_id=str(op.pk), action="ledger.operation.defer"
        )
    ]
    assert delays == [0.05, 0.1]  # exponential from the integration's backoff
    # Kept on the row for the queue's groups and sorts (issue 19): the status and the last try.
    last = op.attempts.order_by("-number").first()
    assert (op.last_error_class, op.last_error_status) == ("transient", 503)
    assert op.last_attempted_at == last.started_at


def test_transient_errors_then_success_make_one_record(approved_enquiry, sandbox, run_queue):
    sandbox.fault("crm.create", "error_503", count=2)
    enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    assert crm_records(sandbox, enquiry.reference) == 1
    assert list(op.attempts.values_list("outcome", flat=True)) == [
        "transient",
        "transient",
        "success",
    ]


def test_invalid_fails_without_retry_and_keeps_the_message(approved_enquiry, sandbox, run_queue):
    sandbox.fault("crm.create", "error_422")
    enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.FAILED))
    run_queue()
    enquiry.refresh_from_db()
    assert op.attention == "invalid"
    assert "422" in op.last_error_message
    assert op.attempts.count() == 1
    assert sandbox.stats()["requests"]["crm.create"] == 1
    assert enquiry.state == EnquiryState.APPROVED


def test_auth_fails_without_retry_and_records_the_owner(
    approved_enquiry, sandbox, run_queue, integrations, make_user
):
    owner = make_user("admin")
    integrations["crm"].owner = owner
    integrations["crm"].save()
    sandbox.fault("crm.create", "error_401")
    _enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.FAILED))
    run_queue()
    # Failed work is its queue's (none set: the admins'); the integration's owner is told.
    assert (op.attention, op.owner) == ("auth", None)
    assert owner in item_owner(op).people()
    assert op.attempts.count() == 1
    told = JournalEntry.objects.get(action="ledger.integration.credentials_refused")
    assert told.evidence["owner"] == owner.get_username()


def test_reset_before_commit_is_reconciled_and_retried_with_the_same_key(
    approved_enquiry, sandbox, run_queue
):
    sandbox.fault("crm.create", "reset_before_commit")
    enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    assert crm_records(sandbox, enquiry.reference) == 1
    outcomes = list(op.attempts.values_list("kind", "outcome"))
    assert outcomes == [("call", "uncertain"), ("lookup", "not_found"), ("call", "success")]


def test_without_idempotency_keys_a_second_lookup_must_agree(
    approved_enquiry, sandbox, run_queue, integrations
):
    sandbox.capabilities(idempotency_key=False)
    integrations["crm"].supports_idempotency_key = False
    integrations["crm"].save()
    sandbox.fault("crm.create", "reset_before_commit")
    enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    assert crm_records(sandbox, enquiry.reference) == 1
    outcomes = list(op.attempts.values_list("kind", "outcome"))
    assert outcomes == [
        ("call", "uncertain"),
        ("lookup", "not_found_first_look"),
        ("lookup", "not_found"),
        ("call", "success"),
    ]


def test_settle_delay_waits_for_a_lagging_search(
    approved_enquiry, sandbox, run_queue, integrations
):
    # The CRM's search shows a record only 1s after it was written.
    sandbox.capabilities(lookup_lag_seconds=1.0)
    integrations["crm"].settle_delay_seconds = 1.5
    integrations["crm"].save()
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    enquiry, op = approved_enquiry()
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    assert crm_records(sandbox, enquiry.reference) == 1
    assert sandbox.stats()["requests"]["crm.create"] == 1


def test_a_changed_payload_is_refused_and_never_sent(approved_enquiry, sandbox, run_queue):
    _enquiry, op = approved_enquiry()
    Operation.objects.filter(pk=op.pk).update(payload={**op.payload, "fields": {"x": "tampered"}})
    run_queue(until=state_is(op, OperationState.FAILED))
    assert op.attention == "payload_mismatch"
    assert "crm.create" not in sandbox.stats()["requests"]


def test_crm_success_and_notification_failure_stay_separate(approved_enquiry, sandbox, run_queue):
    sandbox.fault("notify.send", "error_503", count=5)
    enquiry, crm = approved_enquiry()

    def passed_on_failed():
        # The message telling the resident it was passed on, proposed when the CRM confirmed.
        op = Operation.objects.filter(enquiry=enquiry, payload__template="passed_on").first()
        return op if op is not None and op.state == OperationState.FAILED else None

    run_queue(until=lambda: state_is(crm, OperationState.CONFIRMED)() and passed_on_failed())
    ack = passed_on_failed()
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert crm_records(sandbox, enquiry.reference) == 1
    assert sandbox.stats()["notify"]["total"] == 0
    assert ack.attention == "retry_budget_exhausted"
    assert crm.attempts.count() == 1  # the failed notification never repeated the CRM write
