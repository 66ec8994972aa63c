"""What an operation's outcome changes inside Handover, per action type.

The engine (ledger.execution) decides the operation's state from the outcome class; these
functions carry the outcome into intake's records (the enquiry's state, the suggestion, the
document), always inside the engine's transaction, with the enquiry row already locked.
"""

from __future__ import annotations

from django.utils import timezone

from intake.models import Document, EnquiryState, Suggestion
from ledger import appointments, journal
from ledger.connectors.base import CallResult
from ledger.execution.locking import save_changed
from ledger.models import Action
from ledger.proposals import propose_extraction


def already_done(operation) -> CallResult | None:
    """The policy's check before a call that may be skipped; a result means "done already"."""
    if operation.action == Action.SUGGEST_CATEGORY:
        stored = (
            Suggestion.objects.filter(enquiry_id=operation.enquiry_id, revision=operation.revision)
            .order_by("-created_at")
            .first()
        )
        if stored is not None:
            return CallResult(
                None, str(stored.pk), "", {"label": stored.label, "already_stored": True}
            )
    if operation.action == Action.READ_APPOINTMENTS:
        fresh = _fresh_read(operation)
        if fresh is not None:
            # Still fresh: its answer, with its own "as of", rather than another call.
            return CallResult(None, "", "", {**fresh.result, "reused_from": str(fresh.pk)})
    # documents.extract reads again: "has a reviewer already corrected it?" is answered when
    # the read is applied (apply_extraction), field by field, so a correction always wins.
    return None


def on_success(operation, result: CallResult, *, enquiry, actor):
    action = operation.action
    if action == Action.CREATE_ENQUIRY:
        if enquiry.state in (
            EnquiryState.APPROVED,
            EnquiryState.SUBMITTED,
            EnquiryState.SUBMISSION_UNKNOWN,
        ):
            enquiry.confirm(
                actor=actor,
                reason=f"CRM record {result.external_id} confirmed",
                evidence={"operation": str(operation.pk), "external_id": result.external_id},
            )
            save_changed(enquiry)
    elif action == Action.CLOSE_ENQUIRY:
        journal.record(
            operation.enquiry,
            "ledger.crm_record.closed",
            actor=actor,
            reason=operation.payload.get("reason", ""),
            evidence={"operation": str(operation.pk), "external_id": result.external_id},
        )
    elif action == Action.READ_APPOINTMENTS:
        # A read that failed before this one is answered by it: out of the queue.
        for earlier in operation.__class__.objects.filter(
            enquiry_id=operation.enquiry_id,
            action=Action.READ_APPOINTMENTS,
            state="failed",
            created_at__lte=operation.created_at,
        ).exclude(pk=operation.pk):
            earlier.cancel(
                actor=actor,
                reason="answered by a later read",
                evidence={"later_read": str(operation.pk)},
            )
            earlier.save()
    elif action == Action.SUGGEST_CATEGORY:
        _ready_for_review(enquiry, actor, f"suggestion: {result.result.get('label', '?')}")
    elif action == Action.EXTRACT_DOCUMENT:
        document = _document(operation)
        if document is not None:
            apply_extraction(document, result.content or result.result)


def on_unknown(operation, *, enquiry, actor, reason):
    if operation.action == Action.CREATE_ENQUIRY and enquiry.state == EnquiryState.SUBMITTED:
        enquiry.mark_submission_unknown(
            actor=actor, reason=reason, evidence={"operation": str(operation.pk)}
        )
        save_changed(enquiry)


def on_failed(operation, *, enquiry, actor, attention, message):
    """The operation is `failed` for good (a person must act)."""
    action = operation.action
    if action == Action.CREATE_ENQUIRY:
        if enquiry.state in (EnquiryState.SUBMITTED, EnquiryState.SUBMISSION_UNKNOWN):
            enquiry.delivery_failed(
                actor=actor,
                reason=f"CRM write did not happen: {message}"[:500],
                evidence={"operation": str(operation.pk), "attention": attention},
            )
            save_changed(enquiry)
    elif action == Action.SUGGEST_CATEGORY:
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
    elif action == Action.EXTRACT_DOCUMENT:
        document = _document(operation)
        if document is not None:
            # Never invented fields: `extracted` keeps whatever it held (nothing, at first).
            document.status = DOCUMENT_STATUS.get(attention, "failed")
            document.error = message[:1000]
            document.save(update_fields=["status", "error", "updated_at"])
            current = str(operation.result.get("current_version") or "")
            if attention == "document_changed" and current:
                _read_new_version(operation, enquiry, document, current, actor)


DOCUMENT_STATUS = {"access_denied": "access_denied", "document_changed": "changed"}


def apply_extraction(document, result: dict):
    """A read's fields into ``document.extracted``: always the read's own, so reprocessing the
    same version gives the same result. A reviewer's corrections are kept apart
    (``document.corrected``) and win field by field wherever the fields are used
    (Document.fields): a re-extraction never overwrites one."""
    if "text" in result:  # a kind that extracts from the document's bytes (ledger.extraction)
        fields = {str(k): str(v) for k, v in (result.get("fields") or {}).items()}
        document.text = str(result.get("text") or "")
        document.content_type = str(result.get("content_type") or "")[:100]
    else:  # the sandbox's contract: the document's content as JSON
        fields = extracted_fields(result.get("content"))
    document.status = "extracted"
    document.extracted = fields
    document.error = ""
    document.save(
        update_fields=["status", "extracted", "text", "content_type", "error", "updated_at"]
    )


def _read_new_version(operation, enquiry, document, version, actor):
    """The document changed on the server: the version there now is a new version, attached
    beside the old one and read as itself (never taken for the one that was attached)."""

    if len(version) > Document._meta.get_field("version").max_length:
        return  # not a version Handover can keep: the failed read says what is there
    new, _ = Document.objects.get_or_create(
        enquiry=enquiry, document_id=document.document_id, version=version
    )
    propose_extraction(
        enquiry,
        new,
        actor=actor,
        reason=f"{document.document_id} changed on the server: version {document.version} is "
        f"gone, version {version} is read as a new version",
    )


def extracted_fields(content) -> dict:
    """Only what the document states: a JSON object's scalar fields, nothing guessed."""
    if isinstance(content, dict):
        source = content.get("fields") if isinstance(content.get("fields"), dict) else content
        return {str(k): v for k, v in source.items() if isinstance(v, str | int | float | bool)}
    return {}


def _fresh_read(operation):
    integration = operation.integration
    if integration is None:
        return None
    latest = (
        operation.__class__.objects.filter(
            enquiry_id=operation.enquiry_id, action=Action.READ_APPOINTMENTS, state="confirmed"
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
    if enquiry.state == EnquiryState.VALIDATED:
        enquiry.mark_ready_for_review(actor=actor, reason=reason)
        save_changed(enquiry)
