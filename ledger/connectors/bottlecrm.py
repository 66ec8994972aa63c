"""BottleCRM (the ``django-crm`` package): an approved enquiry becomes a **case**.

Why a case and not a lead: a lead's e-mail is unique per organisation (a resident's second
enquiry would be refused) and a converted lead drops out of the lead list, so a look-up would
miss it. Cases take any number of enquiries from one person.

How the reference survives: it goes in the custom field ``external_ref`` (which BottleCRM can
search exactly, ``?cf_external_ref=``) and at the start of the case's name. BottleCRM drops an
undefined custom field silently and still answers 200, so a create is a success only when the
answer echoes the reference. BottleCRM ignores ``Idempotency-Key``; the name is what stops a
repeat: names are unique per organisation, so a second create with the same reference is
refused with "Case already exists with this name", which means the record *is there*.

Facts and their sources: docs/connectors.md ("BottleCRM, the worked example").
"""

from __future__ import annotations

import unicodedata

from ledger import http, reading
from ledger.connectors.base import CallResult, Connector, ConnectorError, ErrorKind, LookupResult

CASES = "/api/cases/"
CUSTOM_FIELDS = "/api/custom-fields/"
PROFILE = "/api/profile/"  # the token's own profile: its role
REFERENCE_FIELD = "external_ref"
NAME_MAX = 64  # Case.name is a CharField(max_length=64): characters, not bytes
CLOSED = "Closed"


def case_path(case_id: str) -> str:
    # An ID is the destination's data: http.path encodes it whole (or refuses "", ".", "..").
    # BottleCRM's routes end in a slash.
    return http.path("api", "cases", case_id) + "/"


def case_name(reference: str, fields: dict) -> str:
    """The reference first, then the subject (or the start of the message), within 64 characters.

    Django's max_length counts code points, as Python's slicing does. A cut is moved back so
    it never falls inside a character as people see it (before a combining accent, a variation
    selector or a skin tone, or after a joiner), and is marked with an ellipsis.
    """
    words = " ".join(str(fields.get("subject") or fields.get("message") or "Enquiry").split())
    name = f"{reference} {words}".strip()
    if len(name) <= NAME_MAX:
        return name
    cut = NAME_MAX - 1  # room for the ellipsis
    while cut > len(reference) and (_continues(name[cut]) or name[cut - 1] == ZWJ):
        cut -= 1
    return name[:cut].rstrip() + "…"


ZWJ = "\u200d"


def _continues(char: str) -> bool:
    """Whether ``char`` belongs to the character before it (it cannot start one)."""
    code = ord(char)
    return (
        unicodedata.category(char) in ("Mn", "Mc", "Me")
        or char == ZWJ
        or 0xFE00 <= code <= 0xFE0F  # variation selectors (emoji presentation)
        or 0x1F3FB <= code <= 0x1F3FF  # skin tone modifiers
        or 0xE0020 <= code <= 0xE007F  # tag characters (flags of regions)
    )


def case_description(payload: dict) -> str:
    fields = payload.get("fields") or {}
    lines = [
        str(fields.get("message") or "").strip(),
        "",
        "--",
        f"Reference: {payload['reference']}",
    ]
    for label, key in (
        ("Name", "name"),
        ("E-mail", "email"),
        ("Phone", "phone"),
        ("Subject", "subject"),
        ("Service", "service_hint"),
    ):
        if fields.get(key):
            lines.append(f"{label}: {fields[key]}")
    if payload.get("category"):
        lines.append(f"Category: {payload['category']}")
    lines.append(f"Source: {payload.get('source', '')}, revision {payload.get('revision', '')}")
    return "\n".join(lines).strip()


def case_body(payload: dict) -> dict:
    reference = payload["reference"]
    return {
        "name": case_name(reference, payload.get("fields") or {}),
        "status": "New",
        "priority": "Normal",
        "case_type": "Question",
        "description": case_description(payload),
        "custom_fields": {REFERENCE_FIELD: reference},
    }


def _errors(exc: ConnectorError) -> dict:
    try:
        body = reading.parse_json(exc.body)
    except (TypeError, ValueError, reading.Unread):
        return {}
    errors = body.get("errors") if isinstance(body, dict) else None
    return errors if isinstance(errors, dict) else {}


def _name_taken(exc: ConnectorError) -> bool:
    if exc.status != 400:
        return False
    name_errors = _errors(exc).get("name") or []
    if isinstance(name_errors, str):
        name_errors = [name_errors]
    if any("already exists" in str(text) for text in name_errors):
        return True
    # The body may have been cut short; the message is built from the same errors.
    return "name: " in exc.message and "already exists" in exc.message


class BottleCrmCaseCreate(Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "POST",
            "path": CASES,
            "reference": operation.payload.get("reference"),
            "idempotency_key_sent": self.integration.capabilities.idempotency_key,
        }

    def call(self, operation):
        reference = self.needs(operation, "reference")
        try:
            response = self.request(
                "POST",
                CASES,
                operation=operation,
                idempotent=self.integration.capabilities.idempotency_key,
                json_body=case_body(operation.payload),
            )
        except ConnectorError as exc:
            if _name_taken(exc):
                # The name starts with the reference, so a case carrying it is already there
                # (an earlier attempt whose answer was lost): find it, never call it failed.
                raise ConnectorError(
                    ErrorKind.UNCERTAIN,
                    f"BottleCRM already has a case named after {reference}: {exc.message}",
                    status=exc.status,
                    body=exc.body,
                ) from exc
            raise
        body = response.body if isinstance(response.body, dict) else {}
        case = body.get("cases_obj") if isinstance(body.get("cases_obj"), dict) else {}
        case_id = str(body.get("id") or case.get("id") or "")
        custom = case.get("custom_fields") if isinstance(case.get("custom_fields"), dict) else {}
        if custom.get(REFERENCE_FIELD) != reference:
            if not case_id:
                raise ConnectorError(
                    ErrorKind.UNCERTAIN,
                    f"{response.status} without a case id",
                    status=response.status,
                    body=response.summary(),
                )
            # BottleCRM made a case but dropped the reference (the custom field is not
            # defined, or inactive). No look-up will ever find it and a retry would make a
            # second one: a person looks, with the case's ID.
            raise ConnectorError(
                ErrorKind.UNCERTAIN,
                f"BottleCRM answered {response.status} and made case {case_id}, but did not "
                f"keep the reference {reference} in its custom field '{REFERENCE_FIELD}' "
                "(is the field defined for cases? run `manage.py check_integration crm`). "
                "Check that case in BottleCRM, then complete this by hand with its ID.",
                status=response.status,
                body=response.summary(),
                attention="reference_not_stored",
                evidence={"unconfirmed_external_id": case_id},
            )
        return CallResult(
            response.status, case_id, response.summary(), {"case_status": case.get("status")}
        )

    def lookup(self, operation):
        if not self.integration.capabilities.lookup:
            return LookupResult(supported=False)
        reference = self.needs(operation, "reference")
        response = self.request("GET", CASES, params=lookup_params(reference))
        body = response.body if isinstance(response.body, dict) else {}
        cases = body.get("cases")
        if not isinstance(cases, list):
            raise ConnectorError(
                ErrorKind.UNCERTAIN,
                f"{response.status}: the look-up answer has no list of cases",
                status=response.status,
                body=response.summary(),
            )
        found = [
            {"id": case.get("id"), "status": case.get("status")}
            for case in cases
            if isinstance(case, dict) and _carries(case, reference)
        ]
        return LookupResult(found=found, status=response.status, body=response.summary())


def lookup_params(reference: str) -> dict:
    # Deleted and merged cases count: a record that was made, then removed, was still made.
    return {
        f"cf_{REFERENCE_FIELD}": reference,
        "include_deleted": "true",
        "show_merged": "true",
        "limit": "100",
    }


def _carries(case: dict, reference: str) -> bool:
    custom = case.get("custom_fields")
    if not isinstance(custom, dict):
        return True  # the list left the field out: BottleCRM's own exact filter decided
    return custom.get(REFERENCE_FIELD) == reference


class BottleCrmCaseClose(Connector):
    """Compensation: close the case (never delete it). Repeating the close is harmless."""

    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "PATCH",
            "path": self.summary_path("api", "cases", operation.payload.get("external_id", ""))
            + "/",
            "external_id": operation.payload.get("external_id"),
        }

    def call(self, operation):
        case_id = self.needs(operation, "external_id")
        response = self.request(
            "PATCH",
            case_path(case_id),
            operation=operation,
            idempotent=self.integration.capabilities.idempotency_key,
            json_body={"status": CLOSED},
        )
        # 200 with no ID: BottleCRM only says it updated the case named in the path.
        return CallResult(response.status, str(case_id), response.summary(), {"closed": True})

    def lookup(self, operation):
        # "Is the case already closed?" Reading one case by ID needs no search capability.
        case_id = self.needs(operation, "external_id")
        response = self.request("GET", case_path(case_id))
        body = response.body if isinstance(response.body, dict) else {}
        case = body.get("cases_obj") if isinstance(body.get("cases_obj"), dict) else {}
        if case.get("status") == CLOSED:
            return LookupResult(
                found=[{"id": case.get("id") or case_id, "status": CLOSED}],
                status=response.status,
                body=response.summary(),
            )
        return LookupResult(found=[], status=response.status, body=response.summary())
