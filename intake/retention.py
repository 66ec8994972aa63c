"""Retention of personal data: what is redacted on a closed enquiry, and what is kept.

Redacted: contact details, subject and message text (the enquiry, every revision, the stored
event body), document content (extracted and corrected), the resident's answers (their text,
address and subject; their uploaded documents deleted), and any copy of those values in free
text (a suggestion's explanation, a reviewer's note). Kept: references, hashes
(``IntakeEvent.body_sha256``, ``Operation.payload_hash``), states, categories, a suggestion's
label and validation, timestamps and the journal, so an investigation can still follow what
was authorised and done.

The command is ``python manage.py purge_personal_data``; it lives with the ledger, which also
redacts its own copies (operation payloads, attempts) and writes the journal row.
"""

from datetime import timedelta

from django.db.models import QuerySet

from intake.models import Enquiry, EnquiryState
from intake.residentmodels import ResidentFile

REDACTED = "[redacted]"
CLOSED_STATES = (EnquiryState.CONFIRMED, EnquiryState.REJECTED)
# Contact details and the customer's own words, on the enquiry and in revision fields.
PERSONAL_FIELDS = ("name", "email", "phone", "subject", "message")
# A shorter value ("Al", "12") would also match inside unrelated words when scrubbing free text;
# such values are still blanked wherever they sit under a personal key.
_MIN_SCRUB_LENGTH = 4


def due_for_redaction(*, now, retention_days) -> QuerySet:
    """Closed enquiries whose retention period has passed and that still hold personal data."""
    return Enquiry.objects.filter(
        state__in=CLOSED_STATES,
        closed_at__lt=now - timedelta(days=retention_days),
        redacted_at__isnull=True,
    ).order_by("closed_at", "pk")


def personal_values(enquiry) -> list[str]:
    """Every personal value this enquiry holds (enquiry and revisions), longest first."""
    values = {getattr(enquiry, name) for name in PERSONAL_FIELDS}
    for fields in enquiry.revisions.values_list("fields", flat=True):
        if isinstance(fields, dict):
            values.update(str(fields.get(name) or "") for name in PERSONAL_FIELDS)
    found = {v.strip() for v in values if isinstance(v, str) and v.strip()}
    return sorted(found, key=len, reverse=True)


def scrub(value, values, *, keys=PERSONAL_FIELDS):
    """A copy of ``value`` (JSON-like) with personal keys blanked and known values replaced."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if k in keys and value[k] not in (None, "") else scrub(value[k], values))
            for k in value
        }
    if isinstance(value, list):
        return [scrub(item, values) for item in value]
    if isinstance(value, str):
        for secret in values:
            if len(secret) >= _MIN_SCRUB_LENGTH and secret in value:
                value = value.replace(secret, REDACTED)
        return value
    return value


def redact_all_values(value):
    """Document content: every leaf text goes, the structure (field names) stays."""
    if isinstance(value, dict):
        return {k: redact_all_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_all_values(v) for v in value]
    if isinstance(value, str) and value:
        return REDACTED
    return value


def redact_enquiry(enquiry, *, now, values=None) -> dict:
    """Redact one enquiry's personal data held by intake; returns counts (no personal data).

    The caller holds the enquiry's row lock inside a transaction and has re-checked that it is
    due. ``values`` are the personal values collected before anything was blanked.
    """
    values = personal_values(enquiry) if values is None else values
    counts = {"revisions": 0, "documents": 0, "events": 0, "suggestions": 0}

    for name in PERSONAL_FIELDS:
        setattr(enquiry, name, "")
    enquiry.message = REDACTED  # the field may not be empty; the model allows this only now
    enquiry.redacted_at = now
    enquiry.save(update_fields=[*PERSONAL_FIELDS, "redacted_at", "updated_at"])

    for revision in enquiry.revisions.all():
        fields, note = scrub(revision.fields, values), scrub(revision.note, values)
        if (fields, note) != (revision.fields, revision.note):
            revision.fields, revision.note = fields, note
            revision.save(update_fields=["fields", "note"])
            counts["revisions"] += 1

    for document in enquiry.attached.all():
        extracted = redact_all_values(document.extracted)
        corrected = redact_all_values(document.corrected)
        error = scrub(document.error, values)
        text = REDACTED if document.text else ""  # a document's text is all content
        if (extracted, corrected, error, text) != (
            document.extracted,
            document.corrected,
            document.error,
            document.text,
        ):
            document.extracted, document.corrected, document.error = extracted, corrected, error
            document.text = text
            document.save(update_fields=["extracted", "corrected", "error", "text", "updated_at"])
            counts["documents"] += 1

    event = getattr(enquiry, "event", None)  # a reverse one-to-one: None when absent
    if event is not None:
        # body_sha256 stays: it still identifies the delivery and answers a late redelivery.
        if event.body:
            event.body = ""
            event.save(update_fields=["body"])
            counts["events"] += 1
        for conflict in event.conflicts.exclude(body=""):
            conflict.body = ""
            conflict.save(update_fields=["body"])
            counts["events"] += 1

    for suggestion in enquiry.suggestions.all():
        # Generated text about the message paraphrases it (an address, a first name), so
        # matching known values is not enough: it goes whole. The label, validation, confidence,
        # provider, model and prompt version stay as the classification's evidence.
        explanation = REDACTED if suggestion.explanation else ""
        raw = suggestion.raw_output
        raw_output = raw if raw.strip() in ("", suggestion.label) else REDACTED
        if (explanation, raw_output) != (suggestion.explanation, suggestion.raw_output):
            suggestion.explanation, suggestion.raw_output = explanation, raw_output
            suggestion.save(update_fields=["explanation", "raw_output"])
            counts["suggestions"] += 1

    counts["answers"] = redact_answers(enquiry)
    return counts


def redact_answers(enquiry) -> int:
    """The resident's answers to ``enquiry``: their words, address and subject blanked, their
    uploaded documents deleted (all content). How and when each came stays."""
    answers = enquiry.answers.exclude(text="", sender="", subject="")
    ResidentFile.objects.filter(answer__enquiry=enquiry).delete()
    return answers.update(text=REDACTED, sender="", subject="")
