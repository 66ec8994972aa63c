"""ledger.reads: reads' share of the workers and one enquiry's reads taking turns, counted in
PostgreSQL at the claim (the engine's claim, run here in this process; nothing is sent). The same
with a real cluster and a slow document store: tests/ledger/test_reads_workers.py."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from django_q.models import OrmQ

from intake.models import Document
from ledger import execution, reads
from ledger.integrations import ensure_integrations
from ledger.models import Integration, Operation, OperationState
from ledger.proposals import propose_extraction
from tests.ledger.conftest import approver


@pytest.fixture
def rows(db, settings):
    settings.READS_MAX_IN_FLIGHT = 3
    settings.READS_PER_ENQUIRY = 8
    return ensure_integrations()


@pytest.fixture
def documents(make_enquiry, rows):
    """documents(n, enquiry=None) -> n approved reads of one enquiry's documents."""

    def make(n, enquiry=None):
        enquiry = enquiry or make_enquiry()
        ops = []
        for number in range(n):
            document = Document.objects.create(
                enquiry=enquiry, document_id=f"doc-{number}.pdf", version="1"
            )
            ops.append(propose_extraction(enquiry, document, reason="attached")[0])
        return ops

    return make


def claimed(ops) -> list[bool]:
    return [execution.claim(op.pk) is not None for op in ops]


def untouched(op) -> bool:
    """Turned away: still approved, no attempt, its budget untouched, queued to come back."""
    op.refresh_from_db()
    return (
        op.state == OperationState.APPROVED
        and op.attempt_count == 0
        and op.budget_used == 0
        and op.next_attempt_at is not None
        and op.next_attempt_at > timezone.now()
    )


def test_reads_in_flight_never_exceed_the_total_and_the_rest_wait_without_spending_budget(
    documents,
):
    ops = documents(5)
    assert claimed(ops) == [True, True, True, False, False]
    assert all(untouched(op) for op in ops[3:])
    assert Operation.objects.filter(state=OperationState.SUBMITTED).count() == 3
    # Each turned away is queued again (besides the task it was proposed with).
    assert OrmQ.objects.count() == 5 + 2


def test_a_read_whose_outcome_is_recorded_gives_its_place_back(documents):
    ops = documents(4)
    claimed(ops[:3])
    assert claimed(ops[3:]) == [False]
    Operation.objects.filter(pk=ops[0].pk).update(state=OperationState.CONFIRMED)
    Operation.objects.filter(pk=ops[3].pk).update(next_attempt_at=None)
    assert claimed(ops[3:]) == [True]


def test_a_read_whose_worker_is_gone_stops_counting_when_its_lease_expires(documents):
    ops = documents(4)
    claimed(ops[:3])
    Operation.objects.filter(pk=ops[0].pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert claimed(ops[3:]) == [True]


def test_one_enquirys_reads_take_turns_with_another_enquirys(documents, settings):
    settings.READS_PER_ENQUIRY = 2
    first = documents(4)
    second = documents(1)
    assert claimed(first) == [True, True, False, False]
    assert claimed(second) == [True]  # the third place, not the first enquiry's
    assert all(untouched(op) for op in first[2:])


def test_an_integrations_read_share_is_its_limit(documents, rows):
    Integration.objects.filter(name=Integration.DOCUMENTS).update(read_share=1)
    ops = documents(3)
    assert claimed(ops) == [True, False, False]
    assert reads.in_flight(
        execution.executing.READS,
        integration_id=rows[Integration.DOCUMENTS].pk,
        enquiry_id=ops[0].enquiry_id,
        now=timezone.now(),
    ) == (1, 1, 1)


def test_writes_are_never_counted_or_turned_away(documents, make_enquiry, reviewer):
    claimed(documents(3))
    _enquiry, write = approver(make_enquiry, reviewer)()
    assert execution.claim(write.pk) is not None


def test_a_read_share_must_leave_writes_a_worker(rows, settings):
    row = rows[Integration.DOCUMENTS]
    row.read_share = 4  # READS_MAX_IN_FLIGHT is 3
    with pytest.raises(ValidationError) as refused:
        row.full_clean()
    assert "from 1 to 3" in str(refused.value.message_dict["read_share"])
    row.read_share = 3
    row.full_clean()
