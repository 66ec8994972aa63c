"""Connector kinds: which API an integration's destination speaks.

A kind translates; it never decides. For each action its integration serves it names the
connector (create, look-up, close for a CRM), declares what the destination can do, and checks
a configured destination before it is used. Claiming, attempts, classifying outcomes,
reconciling and the retry budget are the engine's (ledger.execution), the same for every kind.

What an integration can do = the kind's declaration narrowed by the row: a row may switch a
capability off (a CRM whose search is broken today) or lengthen the settle delay, never claim
what the kind says the destination cannot do. Everything that reads a capability reads
``Integration.capabilities``.

docs/connectors.md says how to add a kind.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass

from django.conf import settings

from config.destinations import shown
from ledger import messages, reading, smtp
from ledger.connectors.appointments import AppointmentsConnector
from ledger.connectors.base import Connector, ConnectorError, ErrorKind
from ledger.connectors.bottlecrm import (
    CASES,
    CUSTOM_FIELDS,
    PROFILE,
    REFERENCE_FIELD,
    BottleCrmCaseClose,
    BottleCrmCaseCreate,
    lookup_params,
)
from ledger.connectors.caldav import CalDavRead
from ledger.connectors.crm import CrmCloseConnector, CrmCreateConnector
from ledger.connectors.documents import DocumentsConnector
from ledger.connectors.email import SmtpSendConnector
from ledger.connectors.notify import NotifyConnector
from ledger.connectors.webdav import WebDavDocumentRead
from ledger.models import Action, register_kinds

logger = logging.getLogger("ledger.kinds")

HANDOVER, BOTTLECRM, SMTP, CALDAV, WEBDAV = "handover", "bottlecrm", "smtp", "caldav", "webdav"
# BottleCRM's profile roles: a check names one of these, never other text it was sent.
ROLES = ("ADMIN", "USER", "MANAGER", "SALES")
CHOICES = [
    (HANDOVER, "Handover contract (docs/integrations.md; the sandbox)"),
    (BOTTLECRM, "BottleCRM (cases)"),
    (SMTP, "E-mail through an SMTP relay"),
    (CALDAV, "CalDAV calendar (appointments)"),
    (WEBDAV, "WebDAV document store (documents)"),
]
# The address schemes a kind speaks unless it says otherwise (Kind.schemes); the schemes any
# row may hold are config.destinations' rule.
HTTP_SCHEMES = ("http", "https")


@dataclass(frozen=True)
class Capabilities:
    lookup: bool
    idempotency_key: bool
    settle_delay_seconds: float


class Kind:
    """One destination API. Subclasses set the class attributes and may override check()."""

    key: str = ""
    label: str = ""
    # Integration name -> {action -> Connector class}: what this kind can be used for.
    connectors: dict[str, dict[str, type[Connector]]] = {}
    declared = Capabilities(lookup=True, idempotency_key=True, settle_delay_seconds=0.0)
    needs_token = False
    schemes: tuple[str, ...] = HTTP_SCHEMES
    # How a transient failure is retried (ledger.policies.retry_schedule): "budget", the row's
    # retry budget and backoff; "email", for hours as e-mail is (the EMAIL_RETRY_* settings).
    retries = "budget"
    # Action -> the payload fields the destination refuses to go without (not empty): an
    # approval that would send one without them is refused in the reviewer's words first
    # (ledger.services.actions.approve_revision).
    requires: dict[str, tuple[str, ...]] = {}

    def missing(self, action: str, payload: dict) -> list[str]:
        """The fields ``action``'s destination requires that ``payload`` does not hold."""
        return [f for f in self.requires.get(action, ()) if payload.get(f) in (None, "")]

    def serves(self, integration_name: str) -> bool:
        return integration_name in self.connectors

    def connector_class(self, integration_name: str, action: str) -> type[Connector]:
        try:
            return self.connectors[integration_name][action]
        except KeyError:
            raise LookupError(
                f"the {self.label} kind has no connector for {action!r} on {integration_name!r}"
            ) from None

    def capabilities(self, integration) -> Capabilities:
        return Capabilities(
            lookup=self.declared.lookup and integration.supports_lookup,
            idempotency_key=self.declared.idempotency_key and integration.supports_idempotency_key,
            settle_delay_seconds=max(
                self.declared.settle_delay_seconds, integration.settle_delay_seconds or 0.0
            ),
        )

    def validate(self, integration) -> dict[str, str]:
        """What the row must hold for this kind, as field -> message (Integration.clean)."""
        errors = {}
        if not self.serves(integration.name):
            served = ", ".join(sorted(self.connectors)) or messages.SERVES_NOTHING
            errors["kind"] = messages.KIND_CANNOT_SERVE % {
                "kind": self.label,
                "integration": integration.get_name_display(),
                "served": served,
            }
        if self.needs_token and not (integration.token or "").strip():
            errors["token"] = messages.KIND_NEEDS_TOKEN % {"kind": self.label}
        scheme = (integration.base_url or "").partition("://")[0].lower()
        if integration.base_url and scheme not in self.schemes:
            errors["base_url"] = messages.KIND_WRONG_SCHEME % {
                "kind": self.label,
                "schemes": ", ".join(f"{s}://" for s in self.schemes),
            }
        return errors

    def check(self, integration) -> list[str]:
        """Call the destination; each problem in plain words. An empty list: ready to use.
        All its calls together take at most READ_BUDGET_SECONDS (ledger.reading.deadline): a
        check holds a web thread, and a destination that drips its answer must not hold it."""
        problems = [message for message in self.validate(integration).values()]
        if problems:
            return problems
        with reading.deadline(settings.READ_BUDGET_SECONDS):
            try:
                return self.check_destination(integration, Connector(integration))
            except Exception:  # an error of Handover's own, reading what was answered
                logger.exception("checking %s failed inside Handover", integration)
                return [
                    f"{shown(integration.base_url)} answered, but an error inside Handover "
                    "stopped reading the answer (the log has it). Tell the maintainer."
                ]

    def check_destination(self, integration, connector: Connector) -> list[str]:
        return []


def _said(exc: ConnectorError) -> str:
    """What the destination answered, as a check may show it: status, content type, length.

    Never its content: the check calls whatever address an admin typed, and its answer must
    not become a way to read another service's pages (docs/integrations.md, "Addresses")."""
    return exc.answer or (f"HTTP {exc.status}" if exc.status else exc.message)


def _short(value, known=None) -> str:
    """A word the destination returned, shown only if it is one (a role, a field's key)."""
    text = str(value) if value is not None else ""
    if known is not None:
        return text if text in known else "unrecognised"
    return text if re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", text) else "(unreadable)"


def _call_problem(integration, exc: ConnectorError, what: str) -> str:
    """A failed check call in words an admin can act on."""
    where = shown(integration.base_url)
    if exc.unread:
        said = f" ({_said(exc)})" if exc.status is not None else ""
        return (
            f"{where} answered {what}{said}, but Handover stopped reading it: {exc.unread}. "
            "Is the address the destination's API, and is the destination well?"
        )
    if exc.status is not None and 300 <= exc.status < 400:
        return (
            f"{where} answered {what} with a redirect ({_said(exc)}). Handover never follows "
            "redirects, so the token goes only to the address entered: enter the address the "
            "destination's API really has (https? a path?)."
        )
    if exc.status is None:
        if exc.kind is ErrorKind.UNCERTAIN:
            return (
                f"{where} did not answer {what} within {integration.timeout_seconds:g}s "
                f"({exc.message}). Is it overloaded, or is the timeout too short?"
            )
        return f"Cannot reach {where}: {_why_unreachable(exc.message)}."
    if exc.kind is ErrorKind.AUTH:
        return (
            f"{where} refused Handover's credentials ({_said(exc)}). Check the integration's "
            "token: it may be wrong, expired or revoked."
        )
    if exc.status == 404:
        return f"{where} has no {what} ({_said(exc)}): is the address the destination's API root?"
    return f"{where} refused {what}: {_said(exc)}"


def _why_unreachable(detail: str) -> str:
    # requests' text names every layer of the failure; an admin needs the cause.
    causes = [
        ("Connection refused", "nothing is listening at that address and port"),
        ("NameResolution", "the host name does not resolve"),
        ("Name or service not known", "the host name does not resolve"),
        ("No route to host", "no network route to that host"),
        ("connect timeout", "no connection could be made in time (a firewall, or a wrong host?)"),
        ("ConnectTimeout", "no connection could be made in time (a firewall, or a wrong host?)"),
    ]
    for marker, words in causes:
        if marker in detail:
            return f"{words}. Check the address, and that the destination is running"
    return f"{detail[:200]}. Check the address, and that the destination is running"


def _probe_reference() -> str:
    # A reference no enquiry has: the look-up must answer, and answer "none".
    return f"HANDOVER-CHECK-{uuid.uuid4().hex[:12]}"


class HandoverKind(Kind):
    key = HANDOVER
    label = "Handover contract"
    connectors = {
        "crm": {
            Action.CREATE_ENQUIRY: CrmCreateConnector,
            Action.CLOSE_ENQUIRY: CrmCloseConnector,
        },
        "notify": {Action.SEND_NOTICE: NotifyConnector},
        "documents": {Action.EXTRACT_DOCUMENT: DocumentsConnector},
        "appointments": {Action.READ_APPOINTMENTS: AppointmentsConnector},
    }
    # The contract's enquiry is filed under a category (docs/integrations.md).
    requires = {Action.CREATE_ENQUIRY: ("category",)}

    # A read each integration answers without changing anything.
    PROBES = {
        "crm": ("/crm/enquiries", "reference", "the look-up by reference"),
        "notify": ("/notify/messages", "reference", "the look-up by reference"),
        "appointments": ("/appointments", "date", "the free-slots read"),
    }

    def check_destination(self, integration, connector):
        if integration.name == "documents":
            return self._check_document_store(integration, connector)
        path, param, what = self.PROBES[integration.name]
        value = _probe_reference() if param == "reference" else "2000-01-01"
        try:
            connector.request("GET", path, params={param: value})
        except ConnectorError as exc:
            if exc.status == 501 and param == "reference":
                if integration.capabilities.lookup:
                    return [
                        f"{shown(integration.base_url)} cannot be looked up by reference (501), "
                        "but the "
                        "integration says it can: switch 'supports lookup' off, or every "
                        "uncertain write waits for a failing look-up."
                    ]
                return []
            return [_call_problem(integration, exc, what)]
        return []

    @staticmethod
    def _check_document_store(integration, connector):
        # The store has no read that is not about one document: ask for one no enquiry has.
        # Its 404 says it is there and accepted the credentials; anything else is the finding.
        try:
            connector.request("GET", f"/docs/{_probe_reference()}")
        except ConnectorError as exc:
            if exc.status == 404:
                return []
            return [_call_problem(integration, exc, "a document read")]
        return []


class BottleCrmKind(Kind):
    key = BOTTLECRM
    label = "BottleCRM"
    connectors = {
        "crm": {
            Action.CREATE_ENQUIRY: BottleCrmCaseCreate,
            Action.CLOSE_ENQUIRY: BottleCrmCaseClose,
        }
    }
    # BottleCRM ignores Idempotency-Key. Its search sees a write at once, but a create can
    # still arrive after Handover gave up on it; a "not found" is believed only once any such
    # request has been served or killed: gunicorn's default worker timeout (30 s), with which
    # BottleCRM is run. A server run with a longer timeout needs the row's delay raised.
    declared = Capabilities(lookup=True, idempotency_key=False, settle_delay_seconds=30.0)
    needs_token = True
    # A case is filed under the category the description names (docs/connectors.md).
    requires = {Action.CREATE_ENQUIRY: ("category",)}

    def check_destination(self, integration, connector):
        # 1. Reachable, credentials accepted, and the look-up a reconcile relies on answers.
        try:
            response = connector.request("GET", CASES, params=lookup_params(_probe_reference()))
        except ConnectorError as exc:
            if exc.status is not None and exc.status >= 500:
                return [
                    f"BottleCRM's look-up by '{REFERENCE_FIELD}' is not answering ({_said(exc)}). "
                    "Exact look-up by a custom field needs BottleCRM on PostgreSQL. Without it no "
                    "uncertain write can be settled."
                ]
            return [_call_problem(integration, exc, "the case list (/api/cases/)")]
        body = response.body if isinstance(response.body, dict) else {}
        problems = []
        if not isinstance(body.get("cases"), list):
            problems.append(
                f"{shown(integration.base_url)}/api/cases/ answered {response.status} without a "
                "list of cases: is the address BottleCRM's root (without /api)?"
            )
        elif body["cases"]:
            problems.append(
                f"BottleCRM's look-up by '{REFERENCE_FIELD}' does not filter: a reference no "
                f"case has matched {len(body['cases'])} case(s). Is '{REFERENCE_FIELD}' defined "
                "for cases?"
            )
        # 2. An admin's token: BottleCRM shows deleted cases only to admins, and answers
        # anyone else's include_deleted as if it had not been asked. A look-up that cannot
        # see a deleted case would call it "not there", and the retry would make a second.
        try:
            response = connector.request("GET", PROFILE)
        except ConnectorError as exc:
            return [*problems, _call_problem(integration, exc, "the token's profile")]
        body = response.body if isinstance(response.body, dict) else {}
        profile = body.get("user_obj") if isinstance(body.get("user_obj"), dict) else {}
        role = profile.get("role")
        if role != "ADMIN":
            role = _short(role, known=ROLES) if role else "non-admin"
            problems.append(
                f"The token belongs to a {role} profile, not an ADMIN one: "
                "BottleCRM shows deleted cases only to admins, so a look-up could miss a case "
                "and a retry would make a second. Make the token for an admin profile."
            )
        # 3. The custom field the reference lives in, and fields Handover cannot fill.
        try:
            response = connector.request(
                "GET", CUSTOM_FIELDS, params={"target_model": "Case", "include_counts": "false"}
            )
        except ConnectorError as exc:
            return [*problems, _call_problem(integration, exc, "the custom field list")]
        body = response.body if isinstance(response.body, dict) else {}
        definitions = [d for d in body.get("definitions") or [] if isinstance(d, dict)]
        field = next((d for d in definitions if d.get("key") == REFERENCE_FIELD), None)
        how = (
            f"an admin adds it in BottleCRM (Settings, Custom fields: for Cases, key "
            f"'{REFERENCE_FIELD}', type text), or POST {CUSTOM_FIELDS} with "
            f'{{"target_model": "Case", "key": "{REFERENCE_FIELD}", "label": "Handover '
            f'reference", "field_type": "text", "is_filterable": true}}'
        )
        if field is None:
            problems.append(
                f"The custom field '{REFERENCE_FIELD}' is not defined for cases in BottleCRM. "
                "BottleCRM silently drops an undefined field, so no case could be found again "
                f"by its reference and every create would wait for a person. Fix: {how}."
            )
        elif not field.get("is_active", True):
            problems.append(
                f"The custom field '{REFERENCE_FIELD}' exists for cases but is inactive: "
                "BottleCRM drops values for it. Reactivate it in BottleCRM."
            )
        elif field.get("field_type") not in ("text", "textarea"):
            problems.append(
                f"The custom field '{REFERENCE_FIELD}' is a "
                f"{_short(field.get('field_type'))} field: it must be text to hold a reference."
            )
        for other in definitions:
            if other is field or not other.get("is_active", True) or not other.get("is_required"):
                continue
            problems.append(
                f"BottleCRM requires the case field '{_short(other.get('key'))}', which Handover "
                "does not fill: every create would be refused. Make it optional for cases."
            )
        return problems


class SmtpKind(Kind):
    """E-mail: the notification integration's messages through an SMTP relay. The address is
    smtp://, smtp+starttls:// or smtps://[user@]host[:port]; the token is the password."""

    key = SMTP
    label = "E-mail (SMTP)"
    connectors = {"notify": {Action.SEND_NOTICE: SmtpSendConnector}}
    # A relay cannot be asked about a message it may have queued, and has no idempotency key:
    # an uncertain send waits for a person (ledger.smtp).
    declared = Capabilities(lookup=False, idempotency_key=False, settle_delay_seconds=0.0)
    schemes = ("smtp", "smtp+starttls", "smtps")
    retries = "email"

    def validate(self, integration):
        errors = super().validate(integration)
        if "base_url" not in errors:
            try:
                smtp.relay_from_url(integration.base_url)
            except ValueError as exc:
                errors["base_url"] = str(exc)
        return errors

    def check(self, integration):
        problems = list(self.validate(integration).values())
        if problems:
            return problems
        relay = smtp.relay_from_url(integration.base_url, integration.token)
        return smtp.check(relay, timeout=integration.timeout_seconds)


class CalDavKind(Kind):
    """A CalDAV calendar (RFC 4791: Radicale, Nextcloud, SabreDAV, Exchange's gateways...):
    the appointments integration's free and busy time. Reads only, so nothing to look up and
    no idempotency key; the version of a read is the calendar's ctag/sync-token and its
    events' ETags (docs/connectors.md)."""

    key = CALDAV
    label = "CalDAV calendar"
    connectors = {"appointments": {Action.READ_APPOINTMENTS: CalDavRead}}
    declared = Capabilities(lookup=False, idempotency_key=False, settle_delay_seconds=0.0)

    PROPFIND = (
        '<?xml version="1.0" encoding="utf-8"?><D:propfind xmlns:D="DAV:" '
        'xmlns:CS="http://calendarserver.org/ns/"><D:prop><D:resourcetype/><CS:getctag/>'
        "</D:prop></D:propfind>"
    )

    def validate(self, integration):
        errors = super().validate(integration)
        token = integration.token or ""
        if token and ":" not in token:
            errors.setdefault("token", messages.CALDAV_TOKEN_SHAPE)
        return errors

    def check_destination(self, integration, connector):
        from lxml import etree

        reader = CalDavRead(integration)
        try:
            response = reader.request(
                "PROPFIND",
                url=integration.base_url,
                data=self.PROPFIND,
                headers={"Depth": "0", "Content-Type": "application/xml; charset=utf-8"},
            )
        except ConnectorError as exc:
            return [_call_problem(integration, exc, "the calendar's properties (PROPFIND)")]
        try:
            tree = etree.fromstring(response.content or response.text.encode())
        except etree.XMLSyntaxError:
            return [
                f"{integration.base_url} answered PROPFIND without WebDAV XML: is it a CalDAV "
                "server's address?"
            ]
        if next(tree.iter("{urn:ietf:params:xml:ns:caldav}calendar"), None) is None:
            return [
                f"{integration.base_url} is not a calendar collection. The address must be the "
                "calendar's own URL (as a calendar app shows it, ending in the calendar's "
                "name), not the server's root or the account's home."
            ]
        return []


class WebDavKind(Kind):
    key = WEBDAV
    label = "WebDAV"
    connectors = {"documents": {Action.EXTRACT_DOCUMENT: WebDavDocumentRead}}
    # Reads only: nothing to look up, no key to send. A read is repeated, never reconciled.
    declared = Capabilities(lookup=False, idempotency_key=False, settle_delay_seconds=0.0)

    def check_destination(self, integration, connector):
        # OPTIONS on the shared folder: a WebDAV server names its compliance classes (DAV:)
        # and refuses credentials it does not accept, without reading any document. Sent as
        # the reads are (HTTP Basic for a user:password token), not as the base connector.
        connector = WebDavDocumentRead(integration)
        try:
            response = connector.request("OPTIONS", "/")
        except ConnectorError as exc:
            return [_call_problem(integration, exc, "the shared folder")]
        if not response.header("DAV"):
            return [
                f"{integration.base_url} answered OPTIONS {response.status} without a DAV header: "
                "it does not speak WebDAV there. Is the address the shared folder's WebDAV URL?"
            ]
        return []


KINDS: dict[str, Kind] = {
    kind.key: kind
    for kind in (HandoverKind(), BottleCrmKind(), SmtpKind(), CalDavKind(), WebDavKind())
}


register_kinds(KINDS, dict(CHOICES))
