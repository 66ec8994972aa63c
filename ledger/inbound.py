"""Replies by e-mail: django-anymail's Mailgun inbound webhook (a Mailgun route that forwards
to ``/inbound/mailgun/``), its HMAC signature checked with ``MAILGUN_WEBHOOK_SIGNING_KEY``
(and HTTP basic auth too when ``DELIVERY_WEBHOOK_SECRET`` is set).

A signed post is taken once: its timestamp must be within
``INTAKE_TIMESTAMP_TOLERANCE_SECONDS`` of now, and its one-time token is kept with the answer
(unique), so a replay or a redelivery adds nothing. Each reply is threaded to its enquiry by
what only our own messages carry, never by a guess:

1. the signed reply address we gave as Reply-To (intake.residentlink.reply_address), among
   the recipients;
2. our own Message-ID (ledger.notices.message_id) in its In-Reply-To or References headers,
   found through the operation that sent it (ledger.delivery.sent_with).

Matched, it is a revision of that enquiry by the resident (intake.answers.receive_answer: the
text without its quoted part, attachments within the page's limits). Matched by neither, or to
two different enquiries, it waits in the console's queue ("Replies nobody could match") with
an owner. Off (404) until the signing key is set.
"""

from __future__ import annotations

import logging
import re

from anymail.exceptions import AnymailWebhookValidationFailure
from anymail.webhooks.mailgun import MailgunInboundWebhookView
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import IntegrityError
from django.http import Http404, HttpResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from intake import answers, residentlink
from intake.residentmodels import AnswerChannel, ResidentAnswer
from ledger.delivery import sent_with

logger = logging.getLogger("ledger.inbound")

_DIGITS = re.compile(r"\A[0-9]{1,12}\Z")
_TOKEN = re.compile(r"\A[A-Za-z0-9]{1,200}\Z")
_SIGNATURE = re.compile(r"\A[0-9a-f]{64}\Z")
_MESSAGE_ID = re.compile(r"<[^<>\s]{1,250}>")
# The first line of a quoted reply, as mail programs write it: "On <date>, <who> wrote:",
# Outlook's "-----Original Message-----" and "From: " block, a line of "> ".
_QUOTE_START = re.compile(
    r"^(On .{0,300}wrote:\s*$|-{2,}\s*Original Message\s*-{2,}|_{10,}\s*$|From: .+$|>)",
    re.MULTILINE,
)
MAX_REFERENCES = 50


def configured() -> bool:
    anymail = getattr(settings, "ANYMAIL", {}) or {}
    return bool(anymail.get("MAILGUN_WEBHOOK_SIGNING_KEY"))


class MailgunReplies(MailgunInboundWebhookView):
    def validate_request(self, request):
        """Before anymail's checks (it runs every class's in order, this one first): the signed
        fields' shapes, so no value reaches its HMAC that it cannot encode, and the timestamp's
        window."""
        post = request.POST
        timestamp, token, signature = (post.get(k, "") for k in ("timestamp", "token", "signature"))
        if not (_DIGITS.match(timestamp) and _TOKEN.match(token) and _SIGNATURE.match(signature)):
            raise AnymailWebhookValidationFailure("Mailgun inbound post without a valid signature")
        window = settings.INTAKE_TIMESTAMP_TOLERANCE_SECONDS
        if abs(timezone.now().timestamp() - int(timestamp)) > window:
            raise AnymailWebhookValidationFailure("Mailgun inbound post outside its time window")

    def post(self, request, *args, **kwargs):
        self.run_validators(request)  # 400 (SuspiciousOperation) unless signed, and in time
        token = request.POST["token"]
        if ResidentAnswer.objects.filter(provider_token=token).exists():
            return HttpResponse("taken before", content_type="text/plain")
        try:
            message = self.parse_events(request)[0].message
        except Exception as exc:  # anything anymail or the parser raises on a signed post
            # Signed, so kept: a person reads what could be read of it (never dropped).
            logger.info("inbound mail not parsed: %r", exc)
            message = None
        try:
            take_reply(message, request.POST, token=token)
        except IntegrityError:  # its twin committed first
            return HttpResponse("taken before", content_type="text/plain")
        return HttpResponse("taken", content_type="text/plain")


@csrf_exempt  # signed by the provider (HMAC) instead: no browser posts here
@login_not_required
def mailgun_inbound(request):
    if not configured():
        raise Http404("inbound mail is not configured")
    return MailgunReplies.as_view()(request)


# --- threading ------------------------------------------------------------------------------


def _readable(text) -> str:
    """Text as PostgreSQL can keep it: undecodable bytes (surrogate escapes) and NUL replaced."""
    text = str(text or "")
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def referenced_ids(message) -> list[str]:
    """The Message-IDs a reply answers: In-Reply-To first, then References (newest last)."""
    found = []
    for header in ("In-Reply-To", "References"):
        for value in message.get_all(header) or []:
            found += _MESSAGE_ID.findall(_readable(value))
    return list(dict.fromkeys(found))[:MAX_REFERENCES]


def enquiry_by_message_id(ids) -> set:
    matched = set()
    for message_id in ids:
        for sent in sent_with(message_id):
            enquiry_id = sent.values_list("enquiry_id", flat=True).first()
            if enquiry_id is not None:
                matched.add(enquiry_id)
                break
    return matched


def enquiry_by_address(message, post) -> set:
    addresses = [post.get("recipient", "")]
    for header in ("To", "Cc", "Delivered-To"):
        try:
            addresses += [a.addr_spec for a in message.get_address_header(header)]
        except Exception:  # a header the parser cannot read is no address of ours
            continue
    matched = set()
    for address in addresses:
        for part in _readable(address).split(","):
            enquiry = residentlink.enquiry_for_reply_address(part)
            if enquiry is not None:
                matched.add(enquiry.pk)
    return matched


def trim_quoted(text: str) -> str:
    """The reply without the message it quotes: everything from the first quoting line."""
    match = _QUOTE_START.search(text)
    return (text[: match.start()] if match else text).strip()


def _uploads(message) -> tuple[list[answers.Upload], list[str]]:
    """The attachments within the page's limits, and a line for each left out."""
    kept, left = [], []
    most, largest = settings.RESIDENT_UPLOAD_MAX_FILES, settings.RESIDENT_UPLOAD_MAX_BYTES
    for part in message.attachments:
        name = answers.clean_name(_readable(part.get_filename() or "attachment"))
        try:
            data = part.get_content_bytes()
        except Exception:
            left.append(f"{name} (could not be read)")
            continue
        if len(kept) >= most:
            left.append(f"{name} (more than {most} documents)")
        elif len(data) > largest or not data:
            left.append(f"{name} (empty or larger than {answers.size_in_words(largest)})")
        elif answers.file_type(data) is None:
            left.append(f"{name} (not a {answers.KINDS_IN_WORDS} file)")
        else:
            kept.append(answers.Upload(name, data))
    return kept, left


def _text(message, post) -> str:
    if message is None:
        raw = post.get("body-plain") or post.get("body-mime") or ""
        return "(Handover could not read this message as e-mail; its text as received:)\n" + raw
    stripped = getattr(message, "stripped_text", None)
    return stripped if stripped else trim_quoted(_readable(message.text or ""))


def take_reply(message, post, *, token: str) -> ResidentAnswer:
    """Store one signed reply: attached to the one enquiry it answers, else waiting."""
    if message is not None:
        by_address = enquiry_by_address(message, post)
        ids = referenced_ids(message)
        by_id = enquiry_by_message_id(ids)
        sender = message.from_email.addr_spec if hasattr(message.from_email, "addr_spec") else ""
        subject, own_id = message.subject or "", message.get("Message-ID", "")
        uploads, left = _uploads(message)
    else:
        by_address, by_id, ids, sender, subject, own_id = set(), set(), [], "", "", ""
        uploads, left = [], []
    matched = by_address | by_id  # two different enquiries: no guess, it waits
    enquiry_id = next(iter(matched)) if len(matched) == 1 else None
    text = _readable(_text(message, post))
    if left:
        text += "\n\n(Attachments not kept: " + "; ".join(left) + ")"
    if len(text) > answers.TEXT_MAX:
        text = text[: answers.TEXT_MAX - 40].rstrip() + "\n(cut short: the reply was longer)"
    return answers.receive_answer(
        enquiry_id,
        channel=AnswerChannel.EMAIL,
        text=text,
        uploads=uploads,
        sender=_readable(sender)[:254],
        subject=_readable(subject)[: answers.SUBJECT_MAX],
        message_id=_readable(own_id)[:300],
        in_reply_to=(ids[0] if ids else "")[:300],
        provider_token=token,
    )
