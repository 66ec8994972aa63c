"""Validating an intake body: field-level messages a sender can act on, or clean values.

A sender reads these messages in a log or a form builder, so each one says what to change, not
which rule fired.
"""

import re
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

LIMITS = {
    "name": 200,
    "email": 254,
    "phone": 40,
    "subject": 200,
    "message": 10_000,
    "service": 120,
}
MAX_DOCUMENTS = 20
DOCUMENT_ID_MAX = 200
DOCUMENT_VERSION_MAX = 40
ACCEPTED = ("name", "email", "phone", "message", "subject", "service", "documents", "consent")
_PHONE = re.compile(r"\A\+?[0-9 ()\-.]+\Z")


@dataclass
class Payload:
    name: str = ""
    email: str = ""
    phone: str = ""
    subject: str = ""
    message: str = ""
    service: str = ""
    documents: list = field(default_factory=list)
    consent: bool = False

    def revision_fields(self) -> dict:
        """What will be written to the CRM (revision 1); the category comes later, if at all."""
        return {
            "name": self.name,
            "email": self.email,
            "phone": self.phone,
            "subject": self.subject,
            "message": self.message,
            "service_hint": self.service,
            "category": None,
        }


def _text(data, key, errors, *, what):
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.setdefault(key, []).append(f"Send {what} as text (a JSON string).")
        return ""
    value = value.strip()
    if "\x00" in value:
        errors.setdefault(key, []).append(f"Remove the NUL character from {what}.")
        return ""
    limit = LIMITS[key]
    if len(value) > limit:
        errors.setdefault(key, []).append(
            f"Shorten {what} to at most {limit} characters (it has {len(value)})."
        )
        return ""
    return value


def _documents(value, errors) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        errors["documents"] = ['Send documents as a list: [{"id": "...", "version": "..."}].']
        return []
    if len(value) > MAX_DOCUMENTS:
        errors["documents"] = [f"Attach at most {MAX_DOCUMENTS} documents (got {len(value)})."]
        return []
    cleaned, seen, problems = [], set(), []
    for position, item in enumerate(value, start=1):
        if not isinstance(item, dict) or set(item) - {"id", "version"}:
            problems.append(
                f'Document {position}: send an object {{"id": "...", "version": "..."}}.'
            )
            continue
        doc_id, version = item.get("id"), item.get("version")
        if isinstance(version, int) and not isinstance(version, bool):
            version = str(version)
        if not isinstance(doc_id, str) or not doc_id.strip():
            problems.append(f"Document {position}: give its id as non-empty text.")
            continue
        if not isinstance(version, str) or not version.strip():
            problems.append(f"Document {position}: give its version (text or a whole number).")
            continue
        doc_id, version = doc_id.strip(), version.strip()
        if len(doc_id) > DOCUMENT_ID_MAX or len(version) > DOCUMENT_VERSION_MAX:
            problems.append(
                f"Document {position}: keep the id within {DOCUMENT_ID_MAX} and the version "
                f"within {DOCUMENT_VERSION_MAX} characters."
            )
            continue
        if "\x00" in doc_id or "\x00" in version:
            problems.append(f"Document {position}: remove the NUL character.")
            continue
        if (doc_id, version) in seen:
            problems.append(f"Document {position}: {doc_id} version {version} is listed twice.")
            continue
        seen.add((doc_id, version))
        cleaned.append({"id": doc_id, "version": version})
    if problems:
        errors["documents"] = problems
    return cleaned


def validate_payload(data) -> tuple[Payload | None, dict[str, list[str]]]:
    """(Payload, {}) when the body is acceptable, else (None, {field: [messages]})."""
    if not isinstance(data, dict):
        return None, {
            "body": ["Send a JSON object with name, email or phone, message and consent."]
        }
    errors: dict[str, list[str]] = {}
    unknown = sorted(str(k) for k in data if k not in ACCEPTED)
    for key in unknown[:10]:
        errors[key[:64]] = [f"Unknown field; the accepted fields are: {', '.join(ACCEPTED)}."]

    payload = Payload(
        name=_text(data, "name", errors, what="the name"),
        email=_text(data, "email", errors, what="the email address"),
        phone=_text(data, "phone", errors, what="the phone number"),
        subject=_text(data, "subject", errors, what="the subject"),
        message=_text(data, "message", errors, what="the message"),
        service=_text(data, "service", errors, what="the service"),
        documents=_documents(data.get("documents"), errors),
    )
    if payload.email:
        try:
            validate_email(payload.email)
        except ValidationError:
            errors.setdefault("email", []).append(
                f"Check the email address: {payload.email[:80]!r} is not a valid address."
            )
        else:
            # Lower-cased so the advisory customer match is an indexed equality.
            payload.email = payload.email.lower()
    if payload.phone:
        digits = sum(ch.isdigit() for ch in payload.phone)
        if not _PHONE.match(payload.phone) or not 7 <= digits <= 15:
            errors.setdefault("phone", []).append(
                "Check the phone number: use 7 to 15 digits, optionally with +, spaces, "
                "brackets or dashes."
            )
    if not payload.email and not payload.phone and "email" not in errors and "phone" not in errors:
        errors["email"] = ["Give an email address or a phone number so we can reply."]
    if not payload.message and "message" not in errors:
        errors["message"] = ["Tell us what the enquiry is about (the message is empty)."]

    consent = data.get("consent")
    if consent is not True:
        errors["consent"] = [
            "Set consent to true once the person has agreed that we store and use their "
            "enquiry; without it we cannot accept the enquiry."
            if consent in (None, False)
            else "Send consent as true or false (a JSON boolean)."
        ]
    payload.consent = consent is True
    if errors:
        return None, errors
    return payload, {}
