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
"""

from __future__ import annotations

from django.db import transaction

from intake.models import Enquiry
from ledger.services import LEDGER, propose_receipt_work


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
        Enquiry.objects.filter(pk=enquiry.pk).update(receipt_pending=False)
    return True
