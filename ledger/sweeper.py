"""The sweeper: what restarts and lost tasks leave behind, found and put back on its way.

Runs when a worker process starts, every minute on a django-q2 schedule (catch_up off), and
once from ``python manage.py recover``. Safe to run anywhere, any number of times at once:
every change happens under the operation's row lock (SKIP LOCKED), and a duplicate task it
enqueues finds nothing to claim.

0. Receipts no worker has taken up (``receipt_pending``) whose task is gone: taken up here
   (ledger.receipt).
1. `submitted` operations whose worker is gone (its lease expired, or its process on this host
   is dead): `unknown`, the enquiry `submission_unknown`, and reconciled like a timeout.
2. `unknown` operations the system is still working on (no attention code) with no queued
   task: reconcile again.
3. `approved` operations, due, not held, with no live task (a task signed under an old
   SECRET_KEY is dropped unread by django-q2): enqueued again. Those of a paused integration
   are held for the backlog review instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from config.context import background_run
from intake.models import Enquiry
from ledger import execution, receipt
from ledger.models import Attempt, Operation, OperationState
from ledger.queueing import EXECUTE, RECEIPT, RECONCILE, enqueue, live_tasks
from ledger.worker import process_is_gone, worker_actor

logger = logging.getLogger("ledger.sweeper")


@dataclass
class SweepReport:
    lost_in_flight: list[str] = field(default_factory=list)
    reconciles_enqueued: list[str] = field(default_factory=list)
    executions_enqueued: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    receipts_taken_up: list[str] = field(default_factory=list)
    receipts_failed: list[str] = field(default_factory=list)

    def as_dict(self):
        return {k: list(v) for k, v in self.__dict__.items()}

    def summary(self) -> str:
        return (
            f"{len(self.lost_in_flight)} lost in flight -> unknown, "
            f"{len(self.reconciles_enqueued)} reconcile(s) enqueued, "
            f"{len(self.executions_enqueued)} execution(s) re-enqueued, "
            f"{len(self.held)} held for a paused integration, "
            f"{len(self.receipts_taken_up)} receipt(s) taken up, "
            f"{len(self.receipts_failed)} receipt(s) that could not be"
        )

    def __bool__(self):
        return any(self.__dict__.values())


def _recent(when) -> bool:
    # A broker we cannot inspect: trust a task younger than the broker's retry window.
    retry = settings.Q_CLUSTER.get("retry") or 90
    return when is not None and when > timezone.now() - timedelta(seconds=retry)


def _task_is_live(live, op, func) -> bool:
    if live is None:
        return _recent(op.task_enqueued_at)
    return func in live.get(str(op.pk), ())


@background_run("sweep")
def sweep(*, actor=None) -> SweepReport:
    actor = actor or worker_actor()
    now = timezone.now()
    report = SweepReport()

    # 0. Receipts left pending by a lost task. Read before the queue: a receipt committed after
    # this read is not looked at, one committed before has its task in what live_tasks() reads.
    pending = list(Enquiry.objects.filter(receipt_pending=True).values_list("pk", "created_at"))
    if pending:
        live = live_tasks()
        for enquiry_id, created in pending:
            if live is None:
                gone = not _recent(created)
            else:
                gone = RECEIPT not in live.get(str(enquiry_id), ())
            if not gone:
                continue
            try:
                if receipt.take_up_or_record(enquiry_id, skip_locked=True):
                    report.receipts_taken_up.append(str(enquiry_id))
            except Exception:
                # One receipt that cannot be proposed must not stop the sweep's other steps; it
                # stays pending, is tried again next sweep, and is counted on the enquiry: after
                # a few failures it is a row in the console's queue (ledger.receipt).
                logger.exception(
                    "sweep: the receipt of enquiry %s could not be taken up", enquiry_id
                )
                report.receipts_failed.append(str(enquiry_id))

    # 1. In flight with nobody there any more.
    in_flight = Operation.objects.filter(state=OperationState.SUBMITTED).values_list(
        "pk", "lease_owner", "lease_expires_at"
    )
    for op_id, owner, expires in in_flight:
        expired = expires is None or expires < now
        gone = expired or (owner and process_is_gone(owner))
        if gone and _mark_lost(op_id, owner, actor):
            report.lost_in_flight.append(str(op_id))

    live = live_tasks()

    # 2. Unknown, still the system's to resolve, and nothing queued for it.
    waiting = Operation.objects.filter(state=OperationState.UNKNOWN, attention="").filter(
        Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    )
    for op in waiting.filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)):
        if not _task_is_live(live, op, RECONCILE):
            with transaction.atomic():
                enqueue(op, RECONCILE)
            report.reconciles_enqueued.append(str(op.pk))

    # 3. Approved with no live task.
    approved = (
        Operation.objects.filter(state=OperationState.APPROVED, held=False)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .select_related("integration")
    )
    for op in approved:
        if op.integration is not None and op.integration.paused:
            with transaction.atomic():
                locked = (
                    Operation.objects.select_for_update(skip_locked=True)
                    .filter(pk=op.pk, state=OperationState.APPROVED, held=False)
                    .first()
                )
                if locked is not None:
                    execution.hold(locked, actor=actor, reason=f"{op.integration} is paused")
                    report.held.append(str(op.pk))
            continue
        if not _task_is_live(live, op, EXECUTE):
            with transaction.atomic():
                enqueue(op, EXECUTE)
            report.executions_enqueued.append(str(op.pk))

    if report:
        logger.info("sweep: %s", report.summary())
    return report


def _mark_lost(op_id, owner, actor) -> bool:
    now = timezone.now()
    with transaction.atomic():
        enquiry, op = execution.lock_operation(
            op_id, skip_locked=True, state=OperationState.SUBMITTED
        )
        if op is None or op.lease_owner != owner:
            return False
        if op.lease_expires_at and op.lease_expires_at >= now and not process_is_gone(owner):
            return False
        Attempt.objects.filter(operation=op, ended_at__isnull=True).update(
            ended_at=now, outcome="lost", error_class="uncertain", error_message="worker lost"
        )
        op.last_error_class = "uncertain"
        op.last_error_message = f"worker {owner or '?'} stopped mid-call"
        execution.to_unknown(
            op,
            enquiry,
            actor,
            f"worker {owner or '?'} stopped while the call was in flight",
            evidence={"worker": owner},
        )
    return True
