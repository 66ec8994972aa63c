"""ledger.receipt: an enquiry's receipt work (suggestion, extractions, acknowledgement),
proposed in one go after intake's transaction, once however often it is taken up."""

import pytest
from django.db import transaction
from django_q.models import OrmQ

from intake import signals
from intake.models import Document
from ledger import receipt, services
from ledger.models import JournalEntry, Op, Operation
from ledger.queueing import RECEIPT, live_tasks
from ledger.services import proposals


def test_receipt_enqueues_one_task_and_proposes_nothing_in_intakes_transaction(
    make_enquiry, integrations
):
    enquiry = make_enquiry(receipt_pending=True)
    with transaction.atomic():
        signals.enquiry_received.send(sender=type(enquiry), enquiry=enquiry, event=None)
    assert not Operation.objects.exists()
    assert live_tasks() == {str(enquiry.pk): {RECEIPT}}  # the enquiry's ID, nothing else
    # Rolled back with the enquiry's transaction: no task without its enquiry.
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        signals.enquiry_received.send(sender=type(enquiry), enquiry=enquiry, event=None)
        1 / 0  # noqa: B018
    assert OrmQ.objects.count() == 1


def test_receipt_proposes_suggestion_extractions_and_acknowledgement(make_enquiry, integrations):
    enquiry = make_enquiry(receipt_pending=True)
    Document.objects.create(enquiry=enquiry, document_id="lease", version="2")
    Document.objects.create(enquiry=enquiry, document_id="photo", version="1")
    assert receipt.take_up(enquiry.pk)
    enquiry.refresh_from_db()
    assert not enquiry.receipt_pending
    ops = {op.action: op for op in Operation.objects.filter(enquiry=enquiry)}
    assert set(ops) == {"suggest.category", "documents.extract", "notify.send"}
    assert Operation.objects.filter(action="documents.extract").count() == 2
    assert all(op.state == Op.APPROVED for op in Operation.objects.all())
    body = ops["notify.send"].payload["body"]
    assert "received" in body and enquiry.reference in body
    assert "review" not in body.lower()
    live = live_tasks()
    assert all(str(op.pk) in live for op in Operation.objects.all())


def test_receipt_taken_up_twice_makes_nothing_new(make_enquiry, integrations):
    # A redelivered task, or the sweeper beside the task: the second finds the marker cleared.
    enquiry = make_enquiry(receipt_pending=True)
    assert receipt.take_up(enquiry.pk)
    counts = (Operation.objects.count(), OrmQ.objects.count(), JournalEntry.objects.count())
    assert not receipt.take_up(enquiry.pk)
    assert (
        Operation.objects.count(),
        OrmQ.objects.count(),
        JournalEntry.objects.count(),
    ) == counts


def test_receipt_work_proposed_twice_makes_nothing_new(make_enquiry, integrations):
    # Receipt reads the enquiry's keys once and inserts absent ones directly; a second call
    # (a replayed signal) must find them all and add no operation, task or journal row.
    enquiry = make_enquiry()
    with transaction.atomic():
        first = services.propose_receipt_work(enquiry)
    counts = (Operation.objects.count(), OrmQ.objects.count(), JournalEntry.objects.count())
    with transaction.atomic():
        second = services.propose_receipt_work(enquiry)
    assert [op.pk for op in second] == [op.pk for op in first]
    assert (
        Operation.objects.count(),
        OrmQ.objects.count(),
        JournalEntry.objects.count(),
    ) == counts


def _receipt_rows(enquiry):
    """What receipt work left behind, with the enquiry's own IDs taken out."""
    ops = Operation.objects.filter(enquiry=enquiry).order_by("action", "idempotency_key")
    ids = {str(op.pk): f"{op.action}#{i}" for i, op in enumerate(ops)}
    operations = [
        (
            op.action,
            op.state,
            op.revision,
            op.idempotency_key.replace(str(enquiry.pk), "E"),
            op.integration_id,
            op.held,
            op.task_enqueued_at is not None,
        )
        for op in ops
    ]
    journal = [
        (ids[row.subject_id], row.action, row.from_state, row.to_state, row.actor, row.reason)
        for row in JournalEntry.objects.filter(subject_type="ledger.operation", enquiry=enquiry)
    ]
    live = live_tasks()
    tasks = sorted((ids[op_id], sorted(funcs)) for op_id, funcs in live.items() if op_id in ids)
    return operations, journal, tasks


@pytest.mark.parametrize("paused", [False, True], ids=["running", "notify-paused"])
def test_receipt_bulk_insert_writes_what_propose_writes_one_by_one(
    make_enquiry, integrations, paused
):
    # The receipt inserts its operations, journal rows and task rows one statement per table;
    # the rows must be exactly those the general propose() path writes, row by row.
    if paused:
        integrations["notify"].paused = True
        integrations["notify"].save()
    bulk, single = make_enquiry(), make_enquiry()
    for enquiry in (bulk, single):
        Document.objects.create(enquiry=enquiry, document_id="lease", version="2")
    with transaction.atomic():
        services.propose_receipt_work(bulk)
    with transaction.atomic():
        for action, payload, revision, detail, reason in proposals._receipt_specs(
            single, list(Document.objects.filter(enquiry=single))
        ):
            services.propose(
                single,
                action,
                payload,
                revision=revision,
                detail=detail,
                actor=services.LEDGER,
                approve=True,
                reason=reason,
            )
    bulk_rows, single_rows = _receipt_rows(bulk), _receipt_rows(single)
    assert bulk_rows == single_rows
    operations, journal, tasks = bulk_rows
    assert len(operations) == 3 and len(journal) == (7 if paused else 6)
    assert len(tasks) == (2 if paused else 3)


def test_receipt_bulk_insert_rolls_back_whole(make_enquiry, integrations):
    enquiry = make_enquiry()
    counts = (Operation.objects.count(), OrmQ.objects.count(), JournalEntry.objects.count())
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        services.propose_receipt_work(enquiry)
        1 / 0  # noqa: B018
    assert (
        Operation.objects.count(),
        OrmQ.objects.count(),
        JournalEntry.objects.count(),
    ) == counts


def test_receipt_work_runs_in_workers(make_enquiry, integrations, sandbox, run_queue):
    enquiry = make_enquiry(receipt_pending=True)
    with transaction.atomic():
        signals.enquiry_received.send(sender=type(enquiry), enquiry=enquiry, event=None)
    run_queue()
    assert set(Operation.objects.values_list("state", flat=True)) == {Op.CONFIRMED}
    assert enquiry.suggestions.count() == 1
    assert sandbox.stats()["notify"]["by_reference"] == {enquiry.reference: 1}
