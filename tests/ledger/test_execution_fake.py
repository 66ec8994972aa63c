"""The engine's answers to a CRM write that got no answer, with the destination in this process
(tests/ledger/crm_fake.py at ``ledger.http.send``): no test waits out a real timeout. The same
outcome rows against the sandbox process, end to end, are in tests/ledger/test_execution.py."""

import pytest

from ledger import http
from ledger.models import Attempt, OperationState
from tests.ledger.conftest import approver
from tests.ledger.crm_fake import BASE_URL, CREATE, LOOKUP, FakeCrm


@pytest.fixture
def crm(monkeypatch):
    fake = FakeCrm()
    monkeypatch.setattr(http, "send", fake.send)
    return fake


@pytest.fixture
def crm_row(db, crm):
    """The CRM integration at the fake: 1 s timeout, 3 attempts, 0.05 s first backoff."""
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration

    ensure_integrations()
    Integration.objects.filter(name="crm").update(
        base_url=BASE_URL,
        token="",
        timeout_seconds=1.0,
        retry_budget=3,
        backoff_seconds=0.05,
        supports_lookup=True,
        supports_idempotency_key=True,
        settle_delay_seconds=0.0,
        paused=False,
        awaiting_backlog_review=False,
    )
    return Integration.objects.get(name="crm")


@pytest.fixture
def approved(make_enquiry, reviewer, crm_row):
    """approved() -> (enquiry, CRM operation): approved, its task queued, the CRM the fake."""
    return approver(make_enquiry, reviewer)


def state_is(op, *states):
    def check():
        op.refresh_from_db()
        return op.state in states

    return check


def test_lookup_off_goes_to_the_reconciliation_queue_without_a_second_post(
    approved, crm, crm_row, run_queue, make_user
):
    crm_row.owner = make_user("admin")
    crm_row.save()
    crm.lookup = False  # the destination answers 501 to a look-up
    crm.fault(CREATE, "timeout_after_commit")
    _enquiry, op = approved()
    run_queue(until=lambda: Attempt.objects.filter(operation=op, kind="lookup").exists())
    run_queue()
    op.refresh_from_db()
    assert op.state == OperationState.UNKNOWN
    assert op.attention == "lookup_unavailable"
    # Routed by the response policy of its queue, not handed to the integration's owner.
    assert op.owner is None
    assert crm.requests[CREATE] == 1
    assert crm.count() == 1


def test_an_integration_without_lookup_is_never_asked(approved, crm, crm_row, run_queue):
    crm_row.supports_lookup = False
    crm_row.save()
    crm.fault(CREATE, "timeout_after_commit")
    _enquiry, op = approved()
    run_queue(until=state_is(op, OperationState.UNKNOWN))
    run_queue()
    op.refresh_from_db()
    assert (op.state, op.attention) == (OperationState.UNKNOWN, "lookup_unavailable")
    assert crm.requests[LOOKUP] == 0
    assert crm.requests[CREATE] == 1


def test_a_record_that_is_there_is_believed_at_the_first_look_whatever_the_settle_delay(
    approved, crm, crm_row, run_queue
):
    # Only "not found" waits for the settle delay; a found record confirms at once.
    crm_row.settle_delay_seconds = 600
    crm_row.save()
    crm.fault(CREATE, "timeout_after_commit")
    enquiry, op = approved()
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    assert [(a.kind, a.outcome) for a in op.attempts.order_by("number")] == [
        ("call", "uncertain"),
        ("lookup", "found"),
    ]
    assert crm.count(enquiry.reference) == 1
    assert crm.requests[CREATE] == 1


def test_duplicates_at_the_destination_are_flagged_for_a_person(approved, crm, crm_row, run_queue):
    crm.idempotency_key = False
    crm.fault(CREATE, "timeout_after_commit")
    enquiry, op = approved()
    run_queue(until=state_is(op, OperationState.UNKNOWN))
    # Someone else's integration wrote the same reference meanwhile.
    crm.write(enquiry.reference)
    run_queue()
    op.refresh_from_db()
    assert (op.state, op.attention) == (OperationState.UNKNOWN, "duplicate_records")
    assert len(op.result["duplicates"]) == 2
    assert crm.requests[CREATE] == 1  # ours, never a second


def test_a_write_that_timed_out_after_a_503_is_found_and_never_sent_again(approved, crm, run_queue):
    crm.fault(CREATE, "error_503")
    crm.fault(CREATE, "timeout_after_commit")
    enquiry, op = approved()
    run_queue(until=state_is(op, OperationState.CONFIRMED))
    assert [(a.kind, a.outcome) for a in op.attempts.order_by("number")] == [
        ("call", "transient"),
        ("call", "uncertain"),
        ("lookup", "found"),
    ]
    assert crm.count(enquiry.reference) == 1
