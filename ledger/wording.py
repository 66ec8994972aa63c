"""The words a resident receives: one template per message, edited by admins in the console.

A template is plain text with named placeholders from a fixed list (``{reference}``,
``{name}``, ``{message_to_resident}`` ...), filled by plain substitution: Python's own
``string.Formatter`` reads where each placeholder is, and each is replaced by its value as
text. Nothing in a template is ever evaluated (no attribute, no index, no formatting, no tag:
a template is never given to Django's or any other template language), and a value is put in
once, never read again as a template, so ``{{ ''.__class__ }}`` in a template is the text
``{ ''.__class__ }`` and ``{reference}`` typed by a reviewer is those eleven characters. A
template that would not fill (an unknown placeholder, a brace not closed) is refused when it is
saved (``problems``), so a message can never fail to render when it is sent.

One rule makes optional values read well: a line whose placeholders are all empty is left
out (``Their reference for it is {destination_reference}.`` disappears when the destination
gave none; so does the line with ``{answer_link}`` while there is no page to link to).

The HTML part is derived from the filled text: escaped, paragraphs from blank lines, and web
addresses made links. Each message's payload keeps the subject and text it was made with and
the template's version (``resident_payload``), so every attempt sends the same words, and a
later edit changes no message already made. ``moment_passed`` says, at send time, whether what
a message says is still true of its enquiry (ledger.execution cancels one that is not).
"""

from __future__ import annotations

import html
import re
import string
from dataclasses import dataclass

from django.db import transaction
from django.utils import formats, timezone

from intake import residentlink
from intake.models import EnquiryState
from ledger import journal
from ledger.models import Action, MessageTemplate, Operation

RECEIVED = "enquiry_received"
NEEDS_INFORMATION = "needs_information"
PASSED_ON = "passed_on"
NOT_TAKEN_FORWARD = "not_taken_forward"
CLOSED = "closed"

# The fixed list: every placeholder a template can hold, and what it is filled with.
PLACEHOLDERS = {
    "reference": "the enquiry's reference (HX-…)",
    "name": "the name the resident gave (the line is left out when they gave none)",
    "enquiry_subject": "the subject the resident wrote",
    "received_on": "the day the enquiry was received (5 December 2026)",
    "answer_link": "the address of the enquiry's page for the resident (the line is left out "
    "while there is none)",
    "message_to_resident": "what the reviewer wrote for the resident on the form",
    "destination_reference": "the service's own reference for the enquiry (the line is left "
    "out when it gave none)",
    "how_to_reply": "whether a reply to the message reaches us: \u201cyou can also reply to "
    "this message\u201d where replies are read (RESIDENT_REPLY_DOMAIN), else \u201creplies to "
    "it are not read\u201d",
}
COMMON = ("reference", "name", "enquiry_subject", "received_on", "answer_link", "how_to_reply")
SIGN_OFF = "{how_to_reply}"
REPLIES_READ = "You can also reply to this message: your reply is added to the same enquiry."
REPLIES_NOT_READ = "This message was sent automatically; replies to it are not read."


@dataclass(frozen=True)
class Kind:
    name: str
    title: str  # in the console
    when: str  # when it is sent
    not_sent: str  # when it is not
    subject: str  # the shipped words
    body: str
    extra: tuple[str, ...] = ()  # placeholders beyond COMMON
    required: tuple[str, ...] = ()  # placeholders the body must hold

    @property
    def placeholders(self) -> tuple[str, ...]:
        return COMMON + self.extra


KINDS = {
    k.name: k
    for k in [
        Kind(
            RECEIVED,
            "Received (acknowledgement)",
            "when the enquiry is stored, once",
            "no e-mail address; cancelled at send time once a person has acted on the "
            "enquiry (it would say nobody has read it)",
            "We have received your enquiry {reference}",
            "Dear {name},\n\n"
            "Thank you for contacting us. We have received your enquiry and given it the "
            "reference {reference}.\n\n"
            "Nobody has read it yet: it is waiting for a member of our team. We will write to "
            "you again if we need anything more from you, and when it has been passed on to "
            "the service that deals with it.\n\n"
            "You can see where your enquiry has got to here: {answer_link}\n\n"
            "Please quote {reference} if you contact us about this enquiry.\n\n" + SIGN_OFF,
        ),
        Kind(
            NEEDS_INFORMATION,
            "We need more information",
            "each time a reviewer uses Request information (their message to the resident, "
            "never the journal reason)",
            "no e-mail address; cancelled at send time if the enquiry no longer waits for "
            "this request",
            "We need more information about your enquiry {reference}",
            "Dear {name},\n\n"
            "Thank you for your enquiry {reference}. Before we can take it further, we need "
            "more information from you:\n\n"
            "{message_to_resident}\n\n"
            "You can send it to us here: {answer_link}\n\n"
            "Your enquiry will wait with us until we hear from you. Please quote {reference} "
            "whenever you contact us about it.\n\n" + SIGN_OFF,
            extra=("message_to_resident",),
            required=("message_to_resident",),
        ),
        Kind(
            PASSED_ON,
            "Passed on",
            "when the CRM confirms the enquiry's record (by a worker, or completed by hand)",
            "no e-mail address",
            "Your enquiry {reference} has been passed on",
            "Dear {name},\n\n"
            "Your enquiry {reference} has been checked and passed on to the service that "
            "deals with it.\n\n"
            "Their reference for it is {destination_reference}.\n\n"
            "What happens next: the service will contact you if they need anything more, and "
            "when there is news. You do not need to do anything now.\n\n"
            "You can see where your enquiry has got to here: {answer_link}\n\n"
            "Please quote {reference} if you contact us about this enquiry.\n\n" + SIGN_OFF,
            extra=("destination_reference",),
        ),
        Kind(
            NOT_TAKEN_FORWARD,
            "Not taken forward",
            "when a reviewer rejects the enquiry (their message to the resident only)",
            "no e-mail address",
            "About your enquiry {reference}",
            "Dear {name},\n\n"
            "Thank you for your enquiry {reference}. We have read it, and we will not be "
            "taking it forward:\n\n"
            "{message_to_resident}\n\n"
            "If you think we have misunderstood, you are welcome to contact us again, quoting "
            "{reference}.\n\n" + SIGN_OFF,
            extra=("message_to_resident",),
            required=("message_to_resident",),
        ),
        Kind(
            CLOSED,
            "Closed",
            "when an approved enquiry is closed without being passed on (its CRM write "
            "cancelled), with the message to the resident written then",
            "no e-mail address; no message to the resident was written",
            "Your enquiry {reference} has been closed",
            "Dear {name},\n\n"
            "We have closed your enquiry {reference} without passing it on:\n\n"
            "{message_to_resident}\n\n"
            "If you still need help, you are welcome to contact us again, quoting "
            "{reference}.\n\n" + SIGN_OFF,
            extra=("message_to_resident",),
            required=("message_to_resident",),
        ),
    ]
}
SUBJECT_MAX = 200
BODY_MAX = 10_000

_FORMATTER = string.Formatter()
_URL = re.compile(r"https?://[^\s<>\"']+")


def answer_link(enquiry) -> str:
    """The address of the enquiry's page for the resident (intake.residentlink): signed and
    expiring, so it is made afresh for each message."""
    return residentlink.url_for(enquiry)


def how_to_reply(enquiry) -> str:
    """Said only where a reply reaches Handover: a signed reply address given as Reply-To
    (RESIDENT_REPLY_DOMAIN, routed to /inbound/mailgun/)."""
    return REPLIES_READ if residentlink.reply_address(enquiry) else REPLIES_NOT_READ


# --- checking and filling a template ---------------------------------------------------------


def problems(kind: str, subject: str, body: str) -> list[str]:
    """What stops these words being saved as a template of ``kind``: [] when they fill."""
    spec = KINDS[kind]
    found = []
    if not subject.strip():
        found.append("Subject: write a subject.")
    if "\n" in subject.strip() or "\r" in subject.strip():
        found.append("Subject: one line only.")
    if len(subject) > SUBJECT_MAX:
        found.append(f"Subject: at most {SUBJECT_MAX} characters.")
    if not body.strip():
        found.append("Message: write the message.")
    if len(body) > BODY_MAX:
        found.append(f"Message: at most {BODY_MAX} characters.")
    used = set()
    for label, text in (("Subject", subject), ("Message", body)):
        try:
            pieces = list(_FORMATTER.parse(text))
        except ValueError:
            found.append(
                f"{label}: a brace is opened and not closed, or closed and not opened. "
                "A placeholder is a name in braces, like {reference}; write {{ or }} for a "
                "brace itself."
            )
            continue
        for _literal, field, format_spec, conversion in pieces:
            if field is None:
                continue
            shown = field if len(field) <= 40 else field[:40] + "…"
            if field not in spec.placeholders:
                found.append(
                    f"{label}: {{{shown}}} is not a placeholder this message can use. "
                    f"Use: {', '.join('{' + p + '}' for p in spec.placeholders)}."
                )
            elif format_spec or conversion:
                found.append(f"{label}: {{{field}}} takes nothing after its name.")
            used.add(field)
    for name in spec.required:
        if name not in used:
            found.append(f"Message: it must say {{{name}}}, or the resident never reads it.")
    return found


def fill(text: str, values: dict) -> str:
    """``text`` with each placeholder replaced by its value (plain text, put in once). A line
    whose placeholders are all empty is left out. The text must have passed ``problems``."""
    kept = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        out, fields, filled = [], 0, 0
        for literal, field, _spec, _conversion in _FORMATTER.parse(line):
            out.append(literal)
            if field is not None:
                value = str(values.get(field) or "")
                fields += 1
                filled += bool(value.strip())
                out.append(value)
        if fields and not filled:
            continue
        kept.append("".join(out).rstrip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip() + "\n"


def fill_subject(subject: str, values: dict) -> str:
    # One line: a header cannot hold a line break, whatever a value holds.
    return " ".join(fill(subject, values).split())[:300]


def as_html(text: str) -> str:
    """The HTML part of a message, derived from its text: every character escaped, a blank line
    a paragraph, a line break a <br>, a web address a link."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [_linked(line) for line in block.split("\n")]
        paragraphs.append("<p>" + "<br>\n".join(lines) + "</p>")
    return (
        '<!doctype html>\n<html lang="en">\n<body>\n'
        + "\n".join(paragraphs)
        + "\n</body>\n</html>\n"
    )


def _linked(line: str) -> str:
    out, last = [], 0
    for match in _URL.finditer(line):
        out.append(html.escape(line[last : match.start()]))
        url = html.escape(match.group(0))
        out.append(f'<a href="{url}">{url}</a>')
        last = match.end()
    out.append(html.escape(line[last:]))
    return "".join(out)


# --- the templates in the database -----------------------------------------------------------


def current(kind: str) -> MessageTemplate:
    """The newest version of ``kind``'s template (version 1, the shipped words, made if the
    database has none yet)."""
    row = MessageTemplate.objects.filter(kind=kind).order_by("-version").first()
    if row is None:
        spec = KINDS[kind]
        row, _ = MessageTemplate.objects.get_or_create(
            kind=kind, version=1, defaults={"subject": spec.subject, "body": spec.body}
        )
    return row


def publish(kind: str, *, subject: str, body: str, actor, reason: str) -> MessageTemplate:
    """Save an admin's words as the next version of ``kind``, journalled with the reason.
    ValueError (its problems joined) if they would not fill."""
    subject, body = subject.strip(), body.replace("\r\n", "\n").strip() + "\n"
    found = problems(kind, subject, body)
    if found:
        raise ValueError(" ".join(found))
    with transaction.atomic():
        # The kind's rows locked: two admins saving at once make two versions, one after the
        # other, never the same number twice.
        rows = list(MessageTemplate.objects.select_for_update().filter(kind=kind))
        latest = max(rows, key=lambda r: r.version, default=None) or current(kind)
        row = MessageTemplate.objects.create(
            kind=kind,
            version=latest.version + 1,
            subject=subject,
            body=body,
            created_by=actor,
        )
        journal.record(
            row,
            "ledger.message_template.changed",
            actor=actor,
            reason=reason,
            evidence={
                "kind": kind,
                "version": row.version,
                "previous_version": latest.version,
                "subject": subject,
                "body": body,
            },
        )
    return row


# --- a message for one enquiry ---------------------------------------------------------------


def values_for(enquiry, **extra) -> dict:
    received = timezone.localtime(enquiry.created_at).date()
    return {
        "reference": enquiry.reference,
        "name": (enquiry.name or "").strip(),
        "enquiry_subject": (enquiry.subject or "").strip(),
        "received_on": formats.date_format(received, "j F Y"),
        "answer_link": answer_link(enquiry),
        "how_to_reply": how_to_reply(enquiry),
        **{k: v for k, v in extra.items() if k in PLACEHOLDERS},
    }


def render(template, values: dict) -> tuple[str, str, str]:
    """(subject, text, html) of a template (a MessageTemplate, or anything with ``subject``
    and ``body``) filled with ``values``."""
    text = fill(template.body, values)
    return fill_subject(template.subject, values), text, as_html(text)


def resident_payload(kind: str, enquiry, **extra) -> dict:
    """A notify.send payload for a message to the enquiry's resident, made from its state now:
    the address, the kind, the filled subject and text, the template's version, and the state
    it was made in (``moment``: checked again when it is sent)."""
    template = current(kind)
    subject, text, _ = render(template, values_for(enquiry, **extra))
    payload = {
        "to": enquiry.email,
        "template": kind,
        "template_version": template.version,
        "reference": enquiry.reference,
        "subject": subject,
        "body": text,
        "moment": enquiry.state,
    }
    if extra.get("message_to_resident"):
        payload["resident_message"] = extra["message_to_resident"]
    if extra.get("destination_reference"):
        payload["destination_reference"] = extra["destination_reference"]
    return payload


# Before anyone has acted on it: what the acknowledgement says ("Nobody has read it yet").
UNREAD = (EnquiryState.RECEIVED, EnquiryState.VALIDATED, EnquiryState.READY_FOR_REVIEW)
STATE_OF = {
    NEEDS_INFORMATION: EnquiryState.NEEDS_INFORMATION,
    PASSED_ON: EnquiryState.CONFIRMED,
    NOT_TAKEN_FORWARD: EnquiryState.REJECTED,
    CLOSED: EnquiryState.REJECTED,
}


def moment_passed(op, enquiry) -> str:
    """Why what ``op``'s message says is no longer true of ``enquiry`` ("" while it is): the
    check made when the message is about to be sent."""
    kind = op.payload.get("template")
    if enquiry is None or kind not in KINDS:
        return ""
    state = enquiry.get_state_display()
    if kind == RECEIVED:
        acted = (
            enquiry.state not in UNREAD
            or enquiry.current_revision != 1
            or Operation.objects.filter(
                enquiry=enquiry, action=Action.SEND_NOTICE, payload__template=NEEDS_INFORMATION
            ).exists()
        )
        if acted:
            return (
                f"its moment has passed: the acknowledgement says nobody has read the enquiry "
                f"yet, and it is now {state}"
            )
        return ""
    if enquiry.state != STATE_OF[kind]:
        return f"its moment has passed: the enquiry is now {state}"
    if kind == NEEDS_INFORMATION:
        later = Operation.objects.filter(
            enquiry=enquiry,
            action=Action.SEND_NOTICE,
            payload__template=NEEDS_INFORMATION,
            created_at__gt=op.created_at,
        ).exists()
        if later:
            return "its moment has passed: a later request for information replaces it"
    return ""
