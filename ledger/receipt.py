"""The receipt's work, taken up by a worker after intake has answered.

Intake stores the event, the enquiry (``receipt_pending``), its first revision and its journal
row, and tells the ledger (intake.signals.enquiry_received) inside that transaction. The ledger
enqueues one task (ledger.queueing.enqueue_receipt: ``ledger.tasks.take_up_receipt`` with the
enquiry's ID) in the same transaction (the ORM broker; another
broker pushes it on commit): so no enquiry is stored without its receipt queued, and intake's
request does no more. The task, under the enquiry's row lock, proposes the receipt's work (the
category suggestion, one extraction per attached document, the acknowledgement: each approved
by policy and enqueued, as ledger.services.propose_receipt_work always did) and clears the
marker in one transaction. Run twice, or beside the sweeper, it finds the marker cleared and
does nothing. A lost task (django-q2 drops one signed under an old SECRET_KEY; a Redis push
lost in a crash) leaves the marker set: the sweeper takes those receipts up itself.

A receipt whose work cannot be proposed (an error inside Handover, never a destination's: no
call is made here) is counted on the enquiry with its error (``record_failure``). After
``FAILURES_FOR_A_PERSON`` failures it is a row in the console's queue, "Receipt work failing",
with the queue's owner and docs/runbooks/receipt-pending.md; the sweeper keeps trying it, and a
later success clears the count.
"""

from __future__ import annotations

import logging

from django.db import transaction

from intake.models import Enquiry
from ledger import journal, storable
from ledger.services import LEDGER, propose_receipt_work

logger = logging.getLogger("ledger.receipt")

# A failure or two can be a moment's trouble (a lock wait, a restart); three in a row, a minute
# apart at the sweeper's pace, is a receipt that will not go on by itself.
FAILURES_FOR_A_PERSON = 3


def take_up(enquiry_id, *, skip_locked=False, actor=LEDGER) -> bool:
    """Propose the receipt's work for a pending enquiry; False if there was nothing to do
    (taken up already, or, with ``skip_locked``, being taken up by another transaction)."""
    with transaction.atomic():
        enquiry = (
            Enquiry.objects.select_for_update(skip_locked=skip_locked)
            .filter(pk=enquiry_id, receipt_pending=True)
            .first()
        )
        if enquiry is None:
            return False
        # Reads the keys the enquiry already holds: a reviewer may have acted on it meanwhile.
        propose_receipt_work(enquiry, actor=actor)
        Enquiry.objects.filter(pk=enquiry.pk).update(
            receipt_pending=False, receipt_failures=0, receipt_error=""
        )
    return True


def take_up_or_record(enquiry_id, *, skip_locked=False, actor=LEDGER) -> bool:
    """``take_up``; when it raises, the failure is counted on the enquiry (``record_failure``)
    and raised again."""
    try:
        return take_up(enquiry_id, skip_locked=skip_locked, actor=actor)
    except Exception as exc:
        record_failure(enquiry_id, exc, actor=actor)
        raise


def record_failure(enquiry_id, exc, *, actor=LEDGER) -> int:
    """Count one failed take-up on the enquiry and keep its error; the failure that reaches
    ``FAILURES_FOR_A_PERSON`` is journalled (the enquiry enters the queue). Returns the count
    (0 when the receipt is no longer pending)."""
    error = storable.text(f"{type(exc).__name__}: {exc}", 500)
    with transaction.atomic():
        enquiry = (
            Enquiry.objects.select_for_update()
            .filter(pk=enquiry_id, receipt_pending=True)
            .only("pk", "receipt_failures")
            .first()
        )
        if enquiry is None:
            return 0
        failures = enquiry.receipt_failures + 1
        Enquiry.objects.filter(pk=enquiry_id).update(receipt_failures=failures, receipt_error=error)
        if failures == FAILURES_FOR_A_PERSON:
            journal.record(
                enquiry,
                "ledger.receipt.failing",
                actor=actor,
                reason=(
                    f"its receipt work failed {failures} times: a person must look "
                    "(docs/runbooks/receipt-pending.md)"
                ),
                evidence={"failures": failures, "error": error},
            )
    logger.error("the receipt of enquiry %s failed (%s time(s)): %s", enquiry_id, failures, error)
    return failures
