"""Validating an intake body: field-level messages a sender can act on, or clean values.

A sender reads these messages in a log or a form builder, so each one says what to change, not
which rule fired.
"""

import json
import re
import unicodedata
from collections import deque
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
DOCUMENT_VERSION_MAX = 80
# A document's id goes into a URL path at the document store: ASCII letters, digits and a few
# marks, starting with a letter or digit (so never "." or ".."). Its version goes into a query
# (encoded) or an If-Match header (a WebDAV store's ETag): the same, and the braces and comma
# of SharePoint's ETags ("{GUID},N"), which may start with a brace. Documented in
# docs/intake.md; ledger.http.path encodes every segment as well, for stored rows that predate
# it. (The lengths are checked apart, with their own message.)
DOCUMENT_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._:-]*\Z")
DOCUMENT_VERSION = re.compile(r"\A[A-Za-z0-9{][A-Za-z0-9._{},-]*\Z")
ACCEPTED = ("name", "email", "phone", "message", "subject", "service", "documents", "consent")
_PHONE = re.compile(r"\A\+?[0-9 ()\-.]+\Z")
# A body can hold thousands of bad strings; the first few are enough to act on.
MAX_TEXT_PROBLEMS = 20


class NotJson(ValueError):
    """The body does not parse as JSON (the endpoint answers 415)."""


class NestedTooDeeply(ValueError):
    """JSON nested deeper than MAX_DEPTH (the endpoint answers 422, saying so)."""


# The contract's deepest value is a document's field (body -> documents -> object -> text):
# anything far deeper is refused by what it is, not called "not valid JSON" (a 1,000-deep
# array is valid JSON that Python's parser gives up on).
MAX_DEPTH = 32


class _Object(dict):
    """A parsed JSON object that remembers which keys it was sent more than once."""

    __slots__ = ("duplicates",)


def _object(pairs) -> _Object:
    obj = _Object()
    obj.duplicates = []
    for key, value in pairs:
        if key in obj and key not in obj.duplicates:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


def parse_json(text: str):
    """The body's JSON value; objects keep their duplicated keys for ``validate_payload``.

    Raises NotJson. Last-wins on a duplicate key would store one reading of a body whose raw
    text (kept as evidence) reads both ways, so duplicates are recorded here and refused.
    """
    try:
        data = json.loads(text, object_pairs_hook=_object)
    except RecursionError:
        raise NestedTooDeeply(f"more than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise NotJson(str(exc)) from None
    if _deeper_than(data, MAX_DEPTH):
        raise NestedTooDeeply(f"more than {MAX_DEPTH} levels")
    return data


def _deeper_than(data, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, list | dict):
            if depth > limit:
                return True
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return False


def canonical(data):
    """The JSON value as the same event is compared (docs/intake.md, "The same event"): object
    key order, whitespace and escapes do not count; every string (keys too) is compared in
    Unicode NFC; numbers by value; true is not 1. None when two keys of one object become one
    in NFC (then only the same bytes are the same event)."""
    if isinstance(data, str):
        return ("s", unicodedata.normalize("NFC", data))
    if isinstance(data, bool) or data is None:
        return ("c", data)
    if isinstance(data, int | float):
        return ("n", data)
    if isinstance(data, list):
        items = tuple(canonical(item) for item in data)
        return None if None in items else ("l", items)
    keys = {}
    for key, value in data.items():
        name = unicodedata.normalize("NFC", key)
        item = canonical(value)
        if name in keys or item is None or getattr(data, "duplicates", None):
            return None
        keys[name] = item
    return ("o", frozenset(keys.items()))


def _shown(text: str, limit: int = 64) -> str:
    """A key as it can be shown back: lone surrogates and NUL escaped, at most ``limit`` long."""
    escaped = text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode()
    return escaped[:limit]


def _text_problem(text: str) -> str:
    """Why ``text`` cannot be stored as PostgreSQL text (or jsonb), or ""."""
    if "\x00" in text:
        return "remove the NUL character (\\u0000); it cannot be stored."
    if text.isascii():
        return ""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"remove the lone UTF-16 surrogate \\u{ord(text[exc.start]):04x} "
            f"(character {exc.start + 1}); a surrogate escape is only valid as one half of a pair."
        )
    return ""


def unstorable_text(data) -> dict[str, list[str]]:
    """One rule for every string the body carries, keys included, at any depth; and no key
    twice in one object.

    A JSON escape can spell a lone surrogate ("\\ud800") or a NUL, which no UTF-8 column can
    hold. Found here, before any field is read, and named: errors are keyed by the top-level
    field, and a message about something inside it starts with its path (``documents[1].id``).
    """
    errors: dict[str, list[str]] = {}
    found = 0

    def report(top: str, where: str, message: str) -> None:
        nonlocal found
        found += 1
        if found > MAX_TEXT_PROBLEMS:
            return
        shown = message[0].upper() + message[1:] if where in ("", top) else f"{where}: {message}"
        errors.setdefault(top, []).append(shown)

    # Breadth first with an explicit queue: json.loads has already bounded the depth, and the
    # walk adds no recursion of its own. ``where`` is "" for the body itself.
    queue = deque([(data, "", "body")])
    while queue:
        value, where, top = queue.popleft()
        if isinstance(value, str):
            problem = _text_problem(value)
            if problem:
                report(top, where, problem)
        elif isinstance(value, list):
            queue.extend((item, f"{where or top}[{i}]", top) for i, item in enumerate(value))
        elif isinstance(value, dict):
            for key in getattr(value, "duplicates", ()):
                if where:
                    message = f'the key "{_shown(key)}" appears more than once'
                    report(top, where, f"{message}; send each key once.")
                else:
                    report(_shown(key), "", "this key appears more than once; send each key once.")
            for key, item in value.items():
                name = _shown(key)
                child_top, child_where = (top, f"{where}.{name}") if where else (name, name)
                problem = _text_problem(key)
                if problem:
                    report(child_top, where, f'the key "{name}" is not storable text: {problem}')
                else:
                    queue.append((item, child_where, child_top))
    return errors


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
        if not DOCUMENT_ID.match(doc_id) or not DOCUMENT_VERSION.match(version):
            problems.append(
                f"Document {position}: write the id with letters, digits and . _ : - only, "
                "starting with a letter or digit, and the version with letters, digits and "
                ". _ - { } , only, starting with a letter, a digit or { "
                f"(got {_shown(doc_id, 80)!r} version {_shown(version, 80)!r})."
            )
            continue
        if (doc_id, version) in seen:
            problems.append(f"Document {position}: {doc_id} version {version} is listed twice.")
            continue
        seen.add((doc_id, version))
        cleaned.append({"id": doc_id, "version": version})
    if problems:
        errors["documents"] = problems
    return cleaned


def check_email(address: str) -> None:
    """Django's address rule, with the local part widened as RFC 6531 (SMTPUTF8) widens it:
    letters of any script may stand where ASCII letters may ("josé@example.org",
    "用户@例子.广告"); a control, format or space character may not. Raises ValidationError."""
    local, at, domain = address.rpartition("@")
    if at and local and not local.isascii():
        if any(unicodedata.category(ch)[0] in "CZ" for ch in local if not ch.isascii()):
            raise ValidationError("not an address")
        local = "".join(ch if ch.isascii() else "a" for ch in local)
        address = f"{local}@{domain}"
    validate_email(address)


def _email(value: str, errors) -> str:
    """The address as stored (NFC, lower-cased), or a message in ``errors["email"]``."""
    # RFC 6532 asks for NFC: the same address typed on two keyboards is one address.
    value = unicodedata.normalize("NFC", value)
    control = next((ch for ch in value if unicodedata.category(ch) == "Cc"), None)
    if control is not None:
        # Django's rule lets a quoted local part ("a\nb"@example.org) carry control
        # characters; in a message's To: header a line break there starts a header of its own.
        errors.setdefault("email", []).append(
            f"Check the email address: remove the control character U+{ord(control):04X} "
            "(a line break, tab or similar); an address cannot contain one."
        )
        return value
    try:
        check_email(value)
    except ValidationError:
        errors.setdefault("email", []).append(
            f"Check the email address: {value[:80]!r} is not a valid address."
        )
        return value
    # Lower-cased so the advisory customer match is an indexed equality. Lower-casing can
    # lengthen text ("\u0130" becomes two characters), so the limit is checked on what will be
    # stored.
    lowered = value.lower()
    if len(lowered) > LIMITS["email"]:
        errors.setdefault("email", []).append(
            f"Shorten the email address to at most {LIMITS['email']} characters: it has "
            f"{len(lowered)} once lower-cased."
        )
    return lowered


def validate_payload(data) -> tuple[Payload | None, dict[str, list[str]]]:
    """(Payload, {}) when the body is acceptable, else (None, {field: [messages]})."""
    if not isinstance(data, dict):
        return None, {
            "body": ["Send a JSON object with name, email or phone, message and consent."]
        }
    errors = unstorable_text(data)
    if errors:
        # Nothing below may read a string that cannot be stored (or a key sent twice).
        return None, errors
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
        payload.email = _email(payload.email, errors)
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
