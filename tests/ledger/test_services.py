"""The ledger's services and its answers to intake's signals."""

import pytest
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.db import transaction
from django_q.models import OrmQ

from intake import signals
from intake.models import Document, EnquiryState, Revision
from ledger import receipt, services
from ledger.models import JournalEntry, Op, Operation
from ledger.queueing import EXECUTE, RECEIPT, RECONCILE, live_tasks
from ledger.sweeper import sweep
from tests.ledger.conftest import crm_records


def refreshed(op):
    op.refresh_from_db()
    return op


def test_approve_revision_approves_and_enqueues_in_one_transaction(
    make_enquiry, reviewer, integrations
):
    enquiry = make_enquiry()
    op = services.approve_revision(enquiry.pk, actor=reviewer, reason="looks right")
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.APPROVED
    assert enquiry.approved_revision == 1
    assert op.state == Op.APPROVED
    assert op.payload["reference"] == enquiry.reference
    assert op.task_enqueued_at is not None
    assert EXECUTE in live_tasks()[str(op.pk)]  # the queued task carries only the ID
    assert Revision.objects.get(enquiry=enquiry, number=1).approved_by == reviewer


def test_approve_revision_rolls_back_whole(make_enquiry, reviewer, integrations):
    enquiry = make_enquiry()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        services.approve_revision(enquiry.pk, actor=reviewer)
        1 / 0  # noqa: B018
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.READY_FOR_REVIEW
    assert not Operation.objects.filter(state=Op.APPROVED).exists()
    assert OrmQ.objects.count() == 0


def test_a_coordinator_cannot_approve(make_enquiry, make_user, integrations):
    enquiry = make_enquiry()
    with pytest.raises(PermissionDenied):
        services.approve_revision(enquiry.pk, actor=make_user("coordinator"))
    assert not Operation.objects.exists()


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
        for action, payload, revision, detail, reason in services._receipt_specs(
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


def test_document_access_removed_is_a_visible_failure_without_invented_fields(
    make_enquiry, integrations, sandbox, run_queue
):
    enquiry = make_enquiry()
    document = Document.objects.create(enquiry=enquiry, document_id="lease-1", version="1")
    sandbox.set_doc_access("lease-1", False)
    with transaction.atomic():
        services.propose_receipt_work(enquiry)
    run_queue()
    op = Operation.objects.get(action="documents.extract")
    document.refresh_from_db()
    assert (op.state, op.attention) == (Op.FAILED, "access_denied")
    assert (document.status, document.extracted) == ("access_denied", {})
    # One document's access is not the integration's credentials: nobody is told they broke.
    assert not JournalEntry.objects.filter(action="ledger.integration.credentials_refused")
    assert sandbox.stats()["requests"].get("docs.get") == 1


def test_a_new_revision_cancels_the_approved_write_and_proposes_a_new_one(
    approved_enquiry, reviewer, make_user
):
    from intake.services import revise_enquiry

    enquiry, op = approved_enquiry()
    editor = make_user("reviewer")
    revise_enquiry(enquiry.pk, actor=editor, reason="fix phone", fields={"phone": "0123"})
    op.refresh_from_db()
    assert op.state == Op.CANCELLED
    cancelled = JournalEntry.objects.get(subject_id=str(op.pk), to_state="cancelled")
    assert cancelled.reason == "superseded by revision 2"
    new = Operation.objects.get(enquiry=enquiry, revision=2)
    assert (new.action, new.state) == ("crm.create_enquiry", Op.PROPOSED)
    approved = services.approve_revision(enquiry.pk, actor=reviewer, reason="ok")
    assert approved.pk == new.pk and approved.state == Op.APPROVED
    assert approved.idempotency_key.endswith(":crm.create_enquiry:r2")


def test_a_redelivered_event_nudges_stuck_work_and_adds_nothing(
    approved_enquiry, sandbox, run_queue
):
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    sandbox.capabilities(lookup=False)
    enquiry, op = approved_enquiry()
    run_queue()
    assert refreshed(op).attention == "lookup_unavailable"
    # The person's queue holds it; a redelivery does not take it away from them.
    Operation.objects.filter(pk=op.pk).update(attention="")
    before = Operation.objects.count()
    with transaction.atomic():
        signals.event_redelivered.send(sender=type(enquiry), enquiry=enquiry, event=None)
    assert Operation.objects.count() == before
    assert RECONCILE in live_tasks()[str(op.pk)]
    assert JournalEntry.objects.filter(action="ledger.operation.nudged").count() == 1
    assert sandbox.stats()["requests"]["crm.create"] == 1


def test_compensation_closes_the_record_and_never_deletes_it(
    approved_enquiry, sandbox, run_queue, make_user
):
    _enquiry, op = approved_enquiry()
    run_queue()
    assert refreshed(op).state == Op.CONFIRMED
    with pytest.raises(PermissionDenied):
        services.compensate(op.pk, actor=make_user("coordinator"), reason="sent in error")
    admin = make_user("admin")
    close = services.compensate(op.pk, actor=admin, reason="sent in error")
    assert (close.action, close.state, close.compensates_id) == (
        "crm.close_enquiry",
        Op.PROPOSED,
        op.pk,
    )
    run_queue()
    assert "crm.close" not in sandbox.stats()["requests"]  # proposed is not approved
    services.approve_operation(close.pk, actor=admin, reason="confirmed with the customer")
    run_queue()
    assert refreshed(close).state == Op.CONFIRMED
    assert refreshed(op).state == Op.CONFIRMED
    stats = sandbox.stats()["crm"]
    assert (stats["total"], stats["closed"]) == (1, 1)


def test_pause_holds_the_backlog_and_resume_releases_only_what_is_chosen(
    make_enquiry, reviewer, make_user, integrations, sandbox, run_queue
):
    admin = make_user("admin")
    services.pause_integration("crm", actor=admin, reason="CRM maintenance")
    first = services.approve_revision(make_enquiry().pk, actor=reviewer)
    second = services.approve_revision(make_enquiry().pk, actor=reviewer)
    run_queue()
    assert "crm.create" not in sandbox.stats()["requests"]
    assert list(services.backlog("crm")) == [first, second]
    services.resume_integration("crm", actor=admin, reason="maintenance over")
    run_queue()
    assert "crm.create" not in sandbox.stats()["requests"]  # nothing until reviewed
    integrations["crm"].refresh_from_db()
    assert integrations["crm"].awaiting_backlog_review
    services.release_backlog("crm", actor=admin, reason="first checked", operation_ids=[first.pk])
    run_queue()
    assert (refreshed(first).state, refreshed(second).state) == (Op.CONFIRMED, Op.APPROVED)
    assert crm_records(sandbox) == 1
    services.release_backlog("crm", actor=admin, reason="rest checked")
    run_queue()
    assert refreshed(second).state == Op.CONFIRMED
    integrations["crm"].refresh_from_db()
    assert not integrations["crm"].awaiting_backlog_review
    with pytest.raises(PermissionDenied):
        services.pause_integration("crm", actor=reviewer, reason="no")


def test_person_actions_need_a_reason_and_the_right_state(
    approved_enquiry, sandbox, run_queue, make_user
):
    coordinator, admin = make_user("coordinator"), make_user("admin")
    sandbox.fault("crm.create", "error_422")
    enquiry, op = approved_enquiry()
    run_queue()
    assert refreshed(op).state == Op.FAILED
    # Cancelling the write would close the approved enquiry: a reviewer's decision (issue 19).
    assert services.allowed_actions(op, coordinator) == ["complete_by_hand", "reassign"]
    assert "retry" in services.allowed_actions(op, admin)
    with pytest.raises(services.ActionRefused):
        services.retry_operation(op.pk, actor=admin, reason=" ")
    with pytest.raises(PermissionDenied):
        services.retry_operation(op.pk, actor=coordinator, reason="try again")
    with pytest.raises(services.ActionRefused):
        services.reconcile_now(op.pk, actor=coordinator, reason="look")  # not unknown
    services.retry_operation(op.pk, actor=admin, reason="fields fixed at the CRM side")
    run_queue()
    assert refreshed(op).state == Op.CONFIRMED
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert crm_records(sandbox, enquiry.reference) == 1


def test_complete_by_hand_and_cancel(approved_enquiry, sandbox, run_queue, make_user):
    coordinator = make_user("coordinator")
    sandbox.fault("crm.create", "error_422", count=2)
    first, op1 = approved_enquiry()
    second, op2 = approved_enquiry()
    run_queue()
    services.complete_by_hand(op1.pk, actor=coordinator, reason="typed in", external_id="CRM-9")
    services.reassign_operation(op2.pk, actor=coordinator, reason="mine", owner=coordinator)
    assert refreshed(op2).owner == coordinator
    with pytest.raises(PermissionDenied):  # it would close the enquiry: a reviewer decides
        services.cancel_operation(op2.pk, actor=coordinator, reason="customer withdrew")
    assert refreshed(op2).state == Op.FAILED
    services.cancel_operation(op2.pk, actor=make_user("reviewer"), reason="customer withdrew")
    first.refresh_from_db()
    second.refresh_from_db()
    assert (refreshed(op1).state, op1.external_id, first.state) == (
        Op.CONFIRMED,
        "CRM-9",
        EnquiryState.CONFIRMED,
    )
    assert (refreshed(op2).state, second.state) == (Op.CANCELLED, EnquiryState.REJECTED)


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
    assert refreshed(in_flight).state == Op.UNKNOWN
    run_queue()
    assert refreshed(queued).state == Op.CONFIRMED
    assert refreshed(in_flight).state == Op.CONFIRMED  # looked up: not found, sent once
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
    assert set(Operation.objects.values_list("state", flat=True)) == {Op.CONFIRMED}
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
    assert refreshed(lost).state == Op.CONFIRMED
    assert crm_records(sandbox) == 1
    assert sandbox.stats()["notify"]["by_reference"] == {good.reference: 1}


def _receipt_task_row(enquiry):
    from django_q.signing import SignedPackage

    for row in OrmQ.objects.all():
        task = SignedPackage.loads(row.payload)
        if task["func"] == RECEIPT and task["args"] == (str(enquiry.pk),):
            return row.pk
    raise AssertionError(f"no receipt task for {enquiry}")


@pytest.mark.django_db
def test_the_orm_broker_hands_a_task_out_once_until_its_lock_passes(settings):
    """ledger.queueing.OrmBroker (the configured broker): one statement locks and returns the
    oldest due task; a locked or delayed task is not handed out; a task whose lock has passed
    (its worker died) is handed out again; the acknowledgement deletes exactly its row."""
    from datetime import timedelta

    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.signing import SignedPackage

    from ledger.queueing import OrmBroker

    broker = get_broker()
    assert isinstance(broker, OrmBroker)
    now = timezone.now()

    def task(n, lock):
        payload = SignedPackage.dumps({"func": EXECUTE, "args": (f"op-{n}",), "kwargs": {}})
        return OrmQ.objects.create(key=broker.list_key, payload=payload, lock=lock).pk

    delayed = task(0, now + timedelta(minutes=5))
    first = task(1, now - timedelta(seconds=2))
    second = task(2, now - timedelta(seconds=1))

    taken = broker.dequeue()
    assert [pk for pk, _ in taken] == [first]  # bulk 1: the oldest due task
    assert SignedPackage.loads(taken[0][1])["args"] == ("op-1",)
    retry = timedelta(seconds=settings.Q_CLUSTER["retry"])
    assert OrmQ.objects.get(pk=first).lock > now + retry - timedelta(seconds=5)
    assert [pk for pk, _ in broker.dequeue()] == [second]
    assert broker.dequeue() is None  # both locked, the delayed one not yet due

    OrmQ.objects.filter(pk=second).update(lock=now - timedelta(seconds=1))  # its lock passed
    assert [pk for pk, _ in broker.dequeue()] == [second]
    broker.acknowledge(first)
    assert sorted(OrmQ.objects.values_list("pk", flat=True)) == sorted([delayed, second])
