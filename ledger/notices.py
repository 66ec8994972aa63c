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

from ledger import wording

# The messages a resident receives are ledger.wording's (templates admins edit in the console).
ACKNOWLEDGEMENT = wording.RECEIVED
NEEDS_INFORMATION = wording.NEEDS_INFORMATION
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
            OPERATOR_DIGEST,
            "Handover: {count} item(s) need you",
            "a coordinator, reviewer or admin (each can turn these off in the console)",
            "at most once per person per interval, listing what was assigned to them, what "
            "became overdue, queues of theirs nobody opened, and destinations that refused "
            "Handover's credentials.",
            {
                "count": 2,
                "person": "casey",
                "interval": 15,
                "items": [
                    {
                        "what": "Assigned to you by escalation",
                        "title": "HX-2026-000123: CRM write, outcome unknown",
                        "link": "/console/operations/00000000-0000-0000-0000-000000000000/",
                    },
                    {
                        "what": "Refused Handover's credentials",
                        "title": "The CRM integration",
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
    email = EmailMultiAlternatives(
        subject=subject_line,
        body=text,
        from_email=from_email or settings.DEFAULT_FROM_EMAIL,
        to=[payload.get("to", "")],
        headers=headers,
    )
    email.attach_alternative(html, "text/html")
    return email
