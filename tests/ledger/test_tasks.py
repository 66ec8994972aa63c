"""Work done in the background cites its run in the journal: each task, sweep and escalation
run has its own request id (config.context.background_run), shared by every row it writes."""

import pytest
from django.db import transaction
from django.utils import timezone

from config.context import current_request_id, set_request_id
from ledger import sweeper
from ledger.models import JournalEntry, Operation, OperationState
from tests.ledger.conftest import run_due_tasks


@pytest.mark.slow  # the sandbox is a real process
def test_a_task_run_stamps_its_own_id_on_every_row_it_writes(approved_enquiry, sandbox):
    _, op = approved_enquiry()
    before = set(JournalEntry.objects.values_list("pk", flat=True))

    assert run_due_tasks() >= 1

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    written = JournalEntry.objects.exclude(pk__in=before).filter(subject_id=str(op.pk))
    ids = set(written.values_list("request_id", flat=True))
    assert written.count() >= 2  # submitted, confirmed
    assert len(ids) == 1, ids
    (run,) = ids
    assert run.startswith("execute-") and len(run) == len("execute-") + 32
    assert current_request_id() == ""  # the run's id does not outlive it


@pytest.mark.slow
def test_a_sweep_run_has_its_own_id(approved_enquiry, sandbox):
    _, in_flight = approved_enquiry()
    # Claimed by a worker that vanished mid-call: the sweep marks it unknown.
    Operation.objects.filter(pk=in_flight.pk).update(
        lease_owner="worker-elsewhere-1", lease_expires_at=timezone.now()
    )
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=in_flight.pk)
        op.submit(actor="system:test")
        op.save()

    assert sweeper.sweep()

    row = JournalEntry.objects.get(subject_id=str(in_flight.pk), to_state=OperationState.UNKNOWN)
    assert row.request_id.startswith("sweep-"), row.request_id


def test_inside_a_request_the_request_is_the_run(db):
    token = set_request_id("from-the-request")
    try:
        seen = []
        from config.context import background_run

        @background_run("sweep")
        def job():
            seen.append(current_request_id())

        job()
        assert seen == ["from-the-request"]
    finally:
        from config.context import _request_id

        _request_id.reset(token)
