"""ledger.receipt: an enquiry's receipt work (suggestion, extractions, acknowledgement),
proposed in one go after intake's transaction, once however often it is taken up."""

import pytest
from django.db import transaction
from django_q.models import OrmQ

from intake import signals
from intake.models import Document, Enquiry, Revision
from ledger import proposals, receipt, services, sweeper, tasks
from ledger.models import JournalEntry, Operation, OperationState
from ledger.queueing import RECEIPT, live_tasks


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
    assert all(op.state == OperationState.APPROVED for op in Operation.objects.all())
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
    assert set(Operation.objects.values_list("state", flat=True)) == {OperationState.CONFIRMED}
    assert enquiry.suggestions.count() == 1
    assert sandbox.stats()["notify"]["by_reference"] == {enquiry.reference: 1}


# --- keys that fit whatever the sender sends; receipts that keep failing reach a person ---------


def test_receipt_of_the_longest_document_id_and_version_fits_its_key(make_enquiry, integrations):
    # docs/intake.md allows an id of 200 characters and a version of 80: the key
    # "<uuid>:documents.extract:<id>@v<version>:r1" would be 340 characters.
    enquiry = make_enquiry(receipt_pending=True)
    long_id, long_version = "d" * 200, "{" + "9" * 78 + "}"
    Document.objects.create(enquiry=enquiry, document_id=long_id, version=long_version)
    Document.objects.create(enquiry=enquiry, document_id="lease", version="2")
    assert receipt.take_up(enquiry.pk)
    extracts = {
        op.payload["document_id"]: op
        for op in Operation.objects.filter(enquiry=enquiry, action="documents.extract")
    }
    assert set(extracts) == {long_id, "lease"}
    long_key = extracts[long_id].idempotency_key
    assert len(long_key) <= Operation.KEY_MAX_LENGTH
    assert long_id not in long_key and long_key.startswith(f"{enquiry.pk}:documents.extract:")
    # Keys that fit are written as before (stored operations are found by them).
    assert extracts["lease"].idempotency_key == f"{enquiry.pk}:documents.extract:lease@v2:r1"
    # The same document makes the same key: proposing again adds nothing.
    with transaction.atomic():
        again = services.propose_receipt_work(enquiry)
    assert long_key in {op.idempotency_key for op in again}
    assert Operation.objects.filter(enquiry=enquiry).count() == 4


def _unproposable_enquiry(make_enquiry):
    # Validated, as intake leaves it, with an attachment list no Document row can hold (an id
    # past the column): its receipt work fails inside Handover every time it is taken up.
    enquiry = Enquiry.objects.create(
        source="website",
        email="resident@example.org",
        message="My bin was not collected",
        receipt_pending=True,
        documents=[{"id": "x" * 250, "version": "1"}],
    )
    Revision.objects.create(enquiry=enquiry, number=1, fields={"message": enquiry.message})
    with transaction.atomic():
        enquiry.validate(actor="system:test", reason="valid")
        enquiry.save()
    return enquiry


def test_receipt_that_keeps_failing_is_a_queue_item_with_an_owner(
    make_enquiry, integrations, make_user
):
    from recovery.models import Queue, ResponsePolicy
    from recovery.ownership import enquiry_queue
    from recovery.queue.sources import all_rows

    owner = make_user("coordinator", username="receipt-owner")
    ResponsePolicy.objects.create(queue=Queue.RECEIPT_FAILING, owner=owner)
    enquiry = _unproposable_enquiry(make_enquiry)
    for _ in range(receipt.FAILURES_FOR_A_PERSON - 1):
        report = sweeper.sweep(actor=services.LEDGER)
        assert report.receipts_failed == [str(enquiry.pk)]
    assert not [r for r in all_rows() if r["q_key"] == enquiry.reference]
    sweeper.sweep(actor=services.LEDGER)

    enquiry.refresh_from_db()
    assert enquiry.receipt_pending
    assert enquiry.receipt_failures == receipt.FAILURES_FOR_A_PERSON
    assert "DataError" in enquiry.receipt_error
    rows = [r for r in all_rows() if r["q_key"] == enquiry.reference]
    assert len(rows) == 1
    assert rows[0]["q_queue"] == Queue.RECEIPT_FAILING and rows[0]["q_owner"] == owner.pk
    assert enquiry_queue(enquiry) == Queue.RECEIPT_FAILING
    entries = JournalEntry.objects.filter(enquiry=enquiry, action="ledger.receipt.failing")
    assert entries.count() == 1  # journalled once, when it entered the queue
    assert not Operation.objects.filter(enquiry=enquiry).exists()  # nothing half-proposed


def test_receipt_task_that_fails_is_counted_and_a_later_success_clears_it(
    make_enquiry, integrations
):
    enquiry = _unproposable_enquiry(make_enquiry)
    assert tasks.take_up_receipt(str(enquiry.pk)) is False
    enquiry.refresh_from_db()
    assert enquiry.receipt_failures == 1 and enquiry.receipt_error
    Enquiry.objects.filter(pk=enquiry.pk).update(documents=[{"id": "fixed", "version": "1"}])
    assert tasks.take_up_receipt(str(enquiry.pk)) is True
    enquiry.refresh_from_db()
    assert not enquiry.receipt_pending
    assert (enquiry.receipt_failures, enquiry.receipt_error) == (0, "")
