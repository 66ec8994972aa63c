"""A reviewer asks for an attached document to be read again (the same version).

Reprocessing gives the same result for the same version, and never overwrites a reviewer's
correction (ledger.effects.apply_extraction keeps them apart). The read is an operation like
any other: keyed by the document, its version and the enquiry's current revision, so it is
one read per revision; after a correction (a new revision) the same version can be read again.
"""

from django.db import transaction

from intake.models import Document, Enquiry
from ledger import journal
from ledger.models import Action, Operation, OperationState
from ledger.proposals import LEDGER, _operation_key, extraction_detail, propose_extraction
from ledger.services.common import ActionRefused, require_permission, require_reason


def reprocess_document(document_pk, *, actor, reason) -> Operation:
    require_permission(actor, "intake.review_enquiry")
    reason = require_reason(reason)
    enquiry_id = Document.objects.filter(pk=document_pk).values_list("enquiry_id", flat=True)
    if not enquiry_id:
        raise ActionRefused("No such document.")
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id[0])
        document = Document.objects.get(pk=document_pk)
        key = _operation_key(
            enquiry, Action.EXTRACT_DOCUMENT, enquiry.current_revision, extraction_detail(document)
        )
        existing = Operation.objects.filter(idempotency_key=key).first()
        if existing is not None:
            raise ActionRefused(
                f"Version {document.version} of {document.document_id} was already read for "
                f"revision {enquiry.current_revision} ({existing.get_state_display().lower()}"
                f"{'; retry it from its card' if existing.state == OperationState.FAILED else ''})."
            )
        op, _ = propose_extraction(
            enquiry, document, actor=LEDGER, reason=f"read again at a reviewer's request: {reason}"
        )
        journal.record(
            op,
            "ledger.document.reprocess_requested",
            actor=actor,
            reason=reason,
            evidence={"document": document.document_id, "version": document.version},
        )
    return op
