"""What an operation's outcome changes inside Handover, per action type.

The engine (ledger.execution) decides the operation's state from the outcome class; these
functions carry the outcome into intake's records (the enquiry's state, the suggestion, the
document), always inside the engine's transaction, with the enquiry row already locked.
"""

from __future__ import annotations

from django.utils import timezone

from intake.models import Document, EnquiryState, Suggestion
from ledger import journal
from ledger.connectors.base import CallResult

S = EnquiryState


def already_done(operation) -> CallResult | None:
    """The policy's check before a call that may be skipped; a result means "done already"."""
    if operation.action == "suggest.category":
        stored = (
            Suggestion.objects.filter(enquiry_id=operation.enquiry_id, revision=operation.revision)
            .order_by("-created_at")
            .first()
        )
        if stored is not None:
            return CallResult(
                None, str(stored.pk), "", {"label": stored.label, "already_stored": True}
            )
    if operation.action == "appointments.read":
        fresh = _fresh_read(operation)
        if fresh is not None:
            # Still fresh: its answer, with its own "as of", rather than another call.
            return CallResult(None, "", "", {**fresh.result, "reused_from": str(fresh.pk)})
    if operation.action == "documents.extract":
        document = _document(operation)
        if document is not None and document.corrected_by_id is not None:
            # A reviewer's correction always wins: nothing to fetch, nothing to overwrite.
            return CallResult(None, "", "", {"reviewer_corrected": True})
    return None


def on_success(operation, result: CallResult, *, enquiry, actor):
    action = operation.action
    if action == "crm.create_enquiry":
        if enquiry.state in (S.APPROVED, S.SUBMITTED, S.SUBMISSION_UNKNOWN):
            enquiry.confirm(
                actor=actor,
                reason=f"CRM record {result.external_id} confirmed",
                evidence={"operation": str(operation.pk), "external_id": result.external_id},
            )
            enquiry.save()
    elif action == "crm.close_enquiry":
        journal.record(
            operation.enquiry,
            "ledger.crm_record.closed",
            actor=actor,
            reason=operation.payload.get("reason", ""),
            evidence={"operation": str(operation.pk), "external_id": result.external_id},
        )
    elif action == "appointments.read":
        # A read that failed before this one is answered by it: out of the queue.
        for earlier in operation.__class__.objects.filter(
            enquiry_id=operation.enquiry_id,
            action="appointments.read",
            state="failed",
            created_at__lte=operation.created_at,
        ).exclude(pk=operation.pk):
            earlier.cancel(
                actor=actor,
                reason="answered by a later read",
                evidence={"later_read": str(operation.pk)},
            )
            earlier.save()
    elif action == "suggest.category":
        _ready_for_review(enquiry, actor, f"suggestion: {result.result.get('label', '?')}")
    elif action == "documents.extract":
        document = _document(operation)
        untouched = not result.result.get("reviewer_corrected")
        if document is not None and untouched and document.corrected_by_id is None:
            document.status = "extracted"
            document.extracted = extracted_fields(result.result.get("content"))
            document.error = ""
            document.save(update_fields=["status", "extracted", "error", "updated_at"])


def on_unknown(operation, *, enquiry, actor, reason):
    if operation.action == "crm.create_enquiry" and enquiry.state == S.SUBMITTED:
        enquiry.mark_submission_unknown(
            actor=actor, reason=reason, evidence={"operation": str(operation.pk)}
        )
        enquiry.save()


def on_failed(operation, *, enquiry, actor, attention, message):
    """The operation is `failed` for good (a person must act)."""
    action = operation.action
    if action == "crm.create_enquiry":
        if enquiry.state in (S.SUBMITTED, S.SUBMISSION_UNKNOWN):
            enquiry.delivery_failed(
                actor=actor,
                reason=f"CRM write did not happen: {message}"[:500],
                evidence={"operation": str(operation.pk), "attention": attention},
            )
            enquiry.save()
    elif action == "suggest.category":
        # Bounded retry, then `unresolved`: the review queue takes it from here.
        if not Suggestion.objects.filter(
            enquiry_id=operation.enquiry_id, revision=operation.revision
        ).exists():
            Suggestion.objects.create(
                enquiry_id=operation.enquiry_id,
                revision=operation.revision,
                provider="ledger",
                label=Suggestion.UNRESOLVED,
                validation=f"suggester failed: {message}"[:200],
            )
        _ready_for_review(enquiry, actor, "suggester failed; unresolved")
    elif action == "documents.extract":
        document = _document(operation)
        if document is not None:
            # Never invented fields: `extracted` keeps whatever it held (nothing, at first).
            document.status = "access_denied" if attention == "access_denied" else "failed"
            document.error = message[:1000]
            document.save(update_fields=["status", "error", "updated_at"])


def extracted_fields(content) -> dict:
    """Only what the document states: a JSON object's scalar fields, nothing guessed."""
    if isinstance(content, dict):
        source = content.get("fields") if isinstance(content.get("fields"), dict) else content
        return {str(k): v for k, v in source.items() if isinstance(v, str | int | float | bool)}
    return {}


def _fresh_read(operation):
    from ledger import appointments

    integration = operation.integration
    if integration is None:
        return None
    latest = (
        operation.__class__.objects.filter(
            enquiry_id=operation.enquiry_id, action="appointments.read", state="confirmed"
        )
        .exclude(pk=operation.pk)
        .order_by("-created_at")
        .first()
    )
    now = timezone.now()
    if latest is not None and appointments.is_fresh(
        latest.result, integration.max_age_seconds, now
    ):
        return latest
    return None


def _document(operation):
    return Document.objects.filter(
        enquiry_id=operation.enquiry_id,
        document_id=operation.payload.get("document_id", ""),
        version=str(operation.payload.get("version", "")),
    ).first()


def _ready_for_review(enquiry, actor, reason):
    if enquiry.state == S.VALIDATED:
        enquiry.mark_ready_for_review(actor=actor, reason=reason)
        enquiry.save()
