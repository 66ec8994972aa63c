"""The e-mail Handover sends: each notify.send operation's message, built here.

A message to a resident carries in its payload the words it was made with (ledger.wording:
templates admins edit in the console), so every attempt sends the same words. A message to an
operator (the digest) names its template here and carries the values it needs; its templates
live in templates/ledger/mail/<name>.txt and .html, rendered from the payload when it is sent.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string

from intake import residentlink
from ledger import wording

# The messages a resident receives are ledger.wording's (templates admins edit in the console);
# the new link to an expired page is a fixed notice of its own, like the operators' digest.
ACKNOWLEDGEMENT = wording.RECEIVED
NEEDS_INFORMATION = wording.NEEDS_INFORMATION
RESIDENT_LINK = "resident_link"
OPERATOR_DIGEST = "operator_digest"


@dataclass(frozen=True)
class Notice:
    name: str
    subject: str  # formatted with the payload's values
    to_whom: str
    when: str
    sample: dict = field(default_factory=dict)


NOTICES = {
    n.name: n
    for n in [
        Notice(
            RESIDENT_LINK,
            "A new link to your enquiry {reference}",
            "the resident or customer who sent the enquiry, at the address on file",
            "when they open an expired link to their enquiry's page and ask for a new one "
            "(a few times a day at most).",
            {
                "reference": "HX-2026-000123",
                "answer_link": "https://handover.example.org/r/sample-link/",
                "days": 30,
            },
        ),
        Notice(
            OPERATOR_DIGEST,
            "Handover: {count} item(s) need you",
            "a coordinator, reviewer or admin (each can turn these off in the console)",
            "at most once per person per interval, listing what was assigned to them, what "
            "became overdue, queues of theirs nobody opened, and destinations that refused "
            "Handover's credentials: only what is still open and still theirs when the message "
            "is made, each item once. A message that could not be sent goes again with the "
            "next one.",
            {
                "count": 3,
                "person": "casey",
                "interval": 15,
                "items": [
                    {
                        "why": "Assigned to you by alex; Overdue since 1 Dec 2026, 14:00 GMT",
                        "title": "HX-2026-000123: Create the enquiry in the CRM (failed, "
                        "retries used up)",
                        "link": "/console/operations/00000000-0000-0000-0000-000000000000/",
                        "detail": "retry_budget_exhausted: 503: service unavailable",
                    },
                    {
                        "why": "You own the queue",
                        "title": "Nobody opened the queue \u201cOperation failed\u201d (last "
                        "opened: never); 4 items wait in it",
                        "link": "/console/?state=failed",
                    },
                    {
                        "why": "You own the integration",
                        "title": "The CRM integration refused Handover's credentials",
                        "link": "/console/integrations/",
                    },
                ],
            },
        ),
    ]
}


def context(payload: dict) -> dict:
    values = {k: v for k, v in payload.items() if k not in ("to", "body")}
    values["console_url"] = settings.CONSOLE_URL.rstrip("/")
    items = values.get("items")
    if isinstance(items, list):
        # A line's technical detail is not in the line: numbered at the end of the message.
        values["details"] = [
            (number, item["detail"])
            for number, item in enumerate(items, 1)
            if isinstance(item, dict) and item.get("detail")
        ]
        count = values.get("count")
        if isinstance(count, int) and count > len(items):
            values["more"] = count - len(items)
    return values


def subject(name: str, payload: dict) -> str:
    notice = NOTICES[name]
    values = {"reference": "", "count": "", **payload}
    # One line: a header cannot hold a line break, whatever a value holds.
    return " ".join(notice.subject.format(**values).split())


def render(name: str, payload: dict) -> tuple[str, str, str]:
    """(subject, text, html) of a notice with the payload's values."""
    values = context(payload)
    text = render_to_string(f"ledger/mail/{name}.txt", values).strip() + "\n"
    html = render_to_string(f"ledger/mail/{name}.html", values)
    return subject(name, payload), text, html


def resident_message(payload: dict) -> tuple[str, str, str]:
    """(subject, text, html) of a message to a resident: the words its payload was made with
    (ledger.wording.resident_payload); the HTML derived from them. A payload made before the
    words were kept in it is filled from its kind's current template."""
    if "subject" in payload and "body" in payload:
        text = str(payload["body"])
        return " ".join(str(payload["subject"]).split()), text, wording.as_html(text)
    values = {"reference": payload.get("reference", "")}
    values["message_to_resident"] = payload.get("request", "")
    return wording.render(wording.current(payload["template"]), values)


def message_id(idempotency_key: str) -> str:
    """The Message-ID of an operation's message: made from its idempotency key alone, so every
    attempt carries the same one and a relay or a reader can tell a repeat."""
    digest = hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()[:40]
    return f"<{digest}@handover.message-id>"


def build(operation, *, from_email=None) -> EmailMultiAlternatives:
    """The e-mail for a notify.send operation: text and HTML, its stable Message-ID."""
    payload = operation.payload
    name = payload.get("template", "")
    if name in wording.KINDS:
        subject_line, text, html = resident_message(payload)
    elif name in NOTICES:
        subject_line, text, html = render(name, payload)
    else:
        raise LookupError(f"no message template {name!r}")
    headers = {
        "Message-ID": message_id(operation.idempotency_key),
        "Auto-Submitted": "auto-generated",  # RFC 3834: no auto-replies to this, please
    }
    if payload.get("reference"):
        headers["X-Handover-Reference"] = str(payload["reference"])
    enquiry = operation.enquiry if getattr(operation, "enquiry_id", None) else None
    reply_to = residentlink.reply_address(enquiry) if enquiry is not None else None
    if reply_to:
        # A reply carries its enquiry's signed address (ledger.inbound reads it back).
        headers["Reply-To"] = reply_to
    email = EmailMultiAlternatives(
        subject=subject_line,
        body=text,
        from_email=from_email or settings.DEFAULT_FROM_EMAIL,
        to=[payload.get("to", "")],
        headers=headers,
    )
    email.attach_alternative(html, "text/html")
    return email
