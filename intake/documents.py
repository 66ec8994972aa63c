"""A reviewer's correction of a field read from an attached document.

The read's own fields stay as they were read (``Document.extracted``); the correction is kept
apart (``Document.corrected``) and wins wherever the fields are used, so no later read of the
same version can overwrite it. The fields go to the CRM with the revision, so a correction is
also a new revision (its approval is needed again; an earlier one does not carry over). Once
the enquiry can no longer be revised (its CRM write is under way or done) a correction is
refused: what was sent cannot change.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction

from intake import signals
from intake.models import Document, EnquiryState
from intake.services import _locked, revise_enquiry
from intake.workflow import ActionRefused, require_reason

REVISABLE = (
    EnquiryState.VALIDATED,
    EnquiryState.READY_FOR_REVIEW,
    EnquiryState.NEEDS_INFORMATION,
    EnquiryState.APPROVED,
)
MAX_VALUE = 2000


def correct_document_field(document_pk, *, actor, reason, field, value) -> Document:
    """Set ``field`` of a read document to ``value``: journalled (names, never values: the
    journal outlives personal data), and revision N+1 made with the corrected fields."""
    require_reason(reason, actor=actor)
    if isinstance(actor, AbstractBaseUser) and not actor.has_perm("intake.review_enquiry"):
        raise PermissionDenied(f"{actor.get_username()} may not correct documents")
    value = "" if value is None else str(value).strip()
    if len(value) > MAX_VALUE:
        raise ActionRefused(f"Keep the value within {MAX_VALUE} characters.")
    enquiry_id = Document.objects.filter(pk=document_pk).values_list("enquiry_id", flat=True)
    if not enquiry_id:
        raise ActionRefused("No such document.")
    with transaction.atomic():
        enquiry = _locked(enquiry_id[0])
        document = Document.objects.select_for_update().get(pk=document_pk)
        if field not in document.extracted:
            raise ActionRefused(
                f"{document.document_id} version {document.version} has no field {field!r} to "
                "correct."
            )
        if enquiry.state not in REVISABLE:
            raise ActionRefused(
                f"{enquiry.reference} is {enquiry.get_state_display()}: its fields were sent "
                "or are being sent, so they can no longer be corrected."
            )
        before = document.fields.get(field)
        again = field in document.corrected
        if value == before:
            raise ActionRefused(f"{field} is already {value!r}: nothing to correct.")
        document.corrected = {**document.corrected, field: value}
        document.corrected_by = actor if isinstance(actor, AbstractBaseUser) else None
        document.save(update_fields=["corrected", "corrected_by", "updated_at"])
        revision = revise_enquiry(
            enquiry.pk,
            actor=actor,
            reason=f"corrected {field} of {document.document_id}: {reason}",
            fields={},
        )
        signals.enquiry_action.send(
            sender=type(enquiry),
            enquiry=enquiry,
            action="intake.document.corrected",
            actor=actor,
            reason=reason,
            evidence={
                "document": document.document_id,
                "version": document.version,
                "field": field,
                "revision": revision.number,
                "corrected_before": again,
            },
        )
    return document
