"""ledger.sweeper (manage.py recover): lost tasks re-enqueued, lost calls made unknown, lost
receipts taken up, and one bad row never stopping the sweep."""

from django.core.management import call_command
from django.db import transaction
from django_q.models import OrmQ

from intake import signals
from ledger.models import Operation, OperationState
from ledger.queueing import RECEIPT
from ledger.sweeper import sweep
from tests.ledger.conftest import crm_records


def refreshed(op):
    op.refresh_from_db()
    return op


def test_sweeper_reenqueues_lost_tasks_and_recovers_lost_calls(
    approved_enquiry, sandbox, run_queue, capsys
):
    from django.utils import timezone

    _, queued = approved_enquiry()
    _, in_flight = approved_enquiry()
    OrmQ.objects.all().delete()  # both tasks lost (a SECRET_KEY change drops them unread)
    # One had been claimed by a worker that vanished mid-call long ago.
    Operation.objects.filter(pk=in_flight.pk).update(
        lease_owner="worker-elsewhere-1", lease_expires_at=timezone.now()
    )
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=in_flight.pk)
        op.submit(actor="system:test")
        op.save()
    call_command("recover")
    out = capsys.readouterr().out
    assert "1 lost in flight -> unknown" in out
    assert "1 execution(s) re-enqueued" in out
    assert refreshed(in_flight).state == OperationState.UNKNOWN
    run_queue()
    assert refreshed(queued).state == OperationState.CONFIRMED
    assert refreshed(in_flight).state == OperationState.CONFIRMED  # looked up: not found, sent once
    assert crm_records(sandbox) == 2
    assert not sweep()


def test_sweeper_takes_up_a_receipt_whose_task_was_lost(
    make_enquiry, integrations, sandbox, run_queue, capsys
):
    lost, queued = make_enquiry(receipt_pending=True), make_enquiry(receipt_pending=True)
    for enquiry in (lost, queued):
        with transaction.atomic():
            signals.enquiry_received.send(sender=type(enquiry), enquiry=enquiry, event=None)
    OrmQ.objects.filter(pk=_receipt_task_row(lost)).delete()  # dropped unread
    call_command("recover")
    assert "1 receipt(s) taken up" in capsys.readouterr().out
    lost.refresh_from_db()
    queued.refresh_from_db()
    # The lost one is taken up by the sweeper; the queued one is left to its own task.
    assert (lost.receipt_pending, queued.receipt_pending) == (False, True)
    assert Operation.objects.filter(enquiry=lost).count() == 2  # suggestion, acknowledgement
    assert not Operation.objects.filter(enquiry=queued).exists()
    run_queue()
    queued.refresh_from_db()
    assert not queued.receipt_pending
    assert Operation.objects.filter(enquiry=queued).count() == 2
    assert set(Operation.objects.values_list("state", flat=True)) == {OperationState.CONFIRMED}
    # One acknowledgement each at the destination: none lost, none sent twice.
    assert sandbox.stats()["notify"]["by_reference"] == {lost.reference: 1, queued.reference: 1}
    assert not sweep()


def test_a_receipt_that_cannot_be_taken_up_does_not_stop_the_sweep(
    make_enquiry, approved_enquiry, integrations, sandbox, run_queue, capsys
):
    # Its attachment list names a document ID longer than the column: proposing it fails in
    # PostgreSQL, every time. Intake refuses such a payload; the sweeper must survive it anyway.
    broken = make_enquiry(receipt_pending=True, documents=[{"id": "x" * 300, "version": "1"}])
    good = make_enquiry(receipt_pending=True)
    _, lost = approved_enquiry()
    OrmQ.objects.all().delete()  # every task lost: the receipts' and the approved write's
    call_command("recover")
    out = capsys.readouterr().out
    assert "1 receipt(s) taken up, 1 receipt(s) that could not be" in out
    assert "1 execution(s) re-enqueued" in out  # the steps after the failure still ran
    broken.refresh_from_db()
    good.refresh_from_db()
    assert (broken.receipt_pending, good.receipt_pending) == (True, False)
    assert not Operation.objects.filter(enquiry=broken).exists()  # nothing half-written
    run_queue()
    assert refreshed(lost).state == OperationState.CONFIRMED
    assert crm_records(sandbox) == 1
    # The good one's acknowledgement; the lost write's enquiry, confirmed, is told it was
    # passed on. Each once.
    assert sandbox.stats()["notify"]["by_reference"] == {good.reference: 1, lost.reference: 1}


def _receipt_task_row(enquiry):
    from django_q.signing import SignedPackage

    for row in OrmQ.objects.all():
        task = SignedPackage.loads(row.payload)
        if task["func"] == RECEIPT and task["args"] == (str(enquiry.pk),):
            return row.pk
    raise AssertionError(f"no receipt task for {enquiry}")
