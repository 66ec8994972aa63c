"""A resident's answer: what they send back through their page or by e-mail becomes a
revision of the same enquiry, by them, back to review; what cannot be attached waits in the
console's queue with an owner. Never a second enquiry, never attached to a guessed one.

The same rules as intake's endpoint hold for what a resident sends: text that PostgreSQL can
store (no NUL, no lone surrogate), the message's length limit, a bounded number of documents
of a bounded size, each of a type read from its first bytes (never from the name or the type
the sender declared); and a bound on how often one link, one address and one client may send
(``throttle``), kept in the database so it holds across every web process.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.utils import timezone

from intake import signals
from intake.models import Enquiry, EnquiryState
from intake.payload import LIMITS, _text_problem
from intake.residentmodels import (
    AnswerChannel,
    AnswerState,
    ResidentAnswer,
    ResidentFile,
)
from intake.revisions import add_revision
from intake.workflow import RESIDENT, ActionRefused, require_reason

# Where an answer can still change the enquiry: before its approved revision is sent. An
# approved enquiry is not reopened by a resident (its approval would silently lapse); the
# answer waits for a person instead.
ANSWERABLE = (
    EnquiryState.VALIDATED,
    EnquiryState.READY_FOR_REVIEW,
    EnquiryState.NEEDS_INFORMATION,
)
TEXT_MAX = LIMITS["message"]
SUBJECT_MAX = 300
NAME_MAX = 200
# What a resident may upload: the type is read from the file's first bytes.
SIGNATURES = (
    (b"%PDF-", "application/pdf", "PDF"),
    (b"\x89PNG\r\n\x1a\n", "image/png", "PNG"),
    (b"\xff\xd8\xff", "image/jpeg", "JPEG"),
)
KINDS_IN_WORDS = "PDF, JPEG or PNG"


def actor_for(channel: str) -> str:
    return f"{RESIDENT}:{channel}"


class AnswerRefused(ValueError):
    """What the resident sent cannot be taken as it is; ``field`` names where (the page shows
    the message beside it). Nothing was stored."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Upload:
    name: str
    data: bytes


# --- what may be sent -----------------------------------------------------------------------


def clean_text(text, *, field="text", limit=TEXT_MAX, required=False) -> str:
    """``text`` stripped, in NFC, storable and within ``limit``; AnswerRefused otherwise."""
    text = "" if text is None else str(text)
    problem = _text_problem(text)
    if problem:
        raise AnswerRefused(field, "Please " + problem)
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n")).strip()
    if len(text) > limit:
        raise AnswerRefused(
            field, f"Please shorten this to at most {limit:,} characters (it has {len(text):,})."
        )
    if required and not text:
        raise AnswerRefused(field, "Please write your answer, or add a document.")
    return text


def clean_name(name) -> str:
    """A file's name as it can be shown and stored: its last path part, printable, bounded."""
    name = str(name or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = name.encode("utf-8", "replace").decode("utf-8")
    name = "".join(ch for ch in name if ch.isprintable()).strip() or "document"
    return name[:NAME_MAX]


def file_type(data: bytes) -> str | None:
    for magic, content_type, _word in SIGNATURES:
        if data.startswith(magic):
            return content_type
    return None


def size_in_words(size: int) -> str:
    if size >= 1024 * 1024 and size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)} MB"
    return f"{size // 1024:,} KB"


def check_uploads(uploads: list[Upload]) -> list[tuple[str, str, bytes]]:
    """(name, content type, bytes) of each upload, or AnswerRefused naming the first problem."""
    most, largest = settings.RESIDENT_UPLOAD_MAX_FILES, settings.RESIDENT_UPLOAD_MAX_BYTES
    if len(uploads) > most:
        raise AnswerRefused("files", f"Please add at most {most} documents at a time.")
    checked = []
    for upload in uploads:
        name = clean_name(upload.name)
        if len(upload.data) > largest:
            raise AnswerRefused(
                "files",
                f"{name} is larger than {size_in_words(largest)}: please send a smaller copy.",
            )
        if not upload.data:
            raise AnswerRefused("files", f"{name} is empty.")
        content_type = file_type(upload.data)
        if content_type is None:
            raise AnswerRefused("files", f"{name} is not a {KINDS_IN_WORDS} file.")
        checked.append((name, content_type, upload.data))
    return checked


# --- how often ------------------------------------------------------------------------------

_THROTTLE_SQL = (
    "INSERT INTO intake_throttle (key, window_start, count) VALUES (%s, %s, 1) "
    "ON CONFLICT (key, window_start) DO UPDATE SET count = intake_throttle.count + 1 "
    "RETURNING count"
)


# Counters of windows that ended more than a day ago are forgotten: deleted when a key opens
# a new window, so the table holds about a day of keys whatever the traffic.
_FORGET_SQL = "DELETE FROM intake_throttle WHERE window_start < %s"


def throttle(key: str, *, limit: int, seconds: int = 3600, now: datetime | None = None) -> bool:
    """Count one use of ``key`` in the current window; False once it has been used more than
    ``limit`` times in it. One statement, so concurrent uses are counted exactly."""
    now = now or timezone.now()
    start = datetime.fromtimestamp(now.timestamp() // seconds * seconds, tz=now.tzinfo)
    with connection.cursor() as cursor:
        cursor.execute(_THROTTLE_SQL, [key[:200], start])
        (count,) = cursor.fetchone()
        if count == 1:
            cursor.execute(_FORGET_SQL, [now - timedelta(seconds=seconds) - timedelta(days=1)])
    return count <= limit


# --- attaching ------------------------------------------------------------------------------


def _added_text(text: str, names: list[str], channel: str, now: datetime) -> str:
    when = timezone.localtime(now).strftime("%d %b %Y %H:%M")
    lines = [f"--- Added by the resident ({AnswerChannel(channel).label}, {when}) ---"]
    if text:
        lines.append(text)
    if names:
        lines.append("Documents: " + ", ".join(names))
    return "\n".join(lines)


def add_to_enquiry(enquiry: Enquiry, answer: ResidentAnswer, names: list[str], *, actor, reason):
    """Revision N+1 by the resident, under the enquiry's lock; needs_information goes back to
    ready_for_review. Journalled on the enquiry (the revision and, where it moves, the
    transition), with names and counts, never the resident's words."""
    previous = enquiry.revision
    fields = dict(previous.fields)
    added = _added_text(answer.text, names, answer.channel, answer.received_at)
    fields["message"] = f"{fields.get('message') or ''}\n\n{added}".strip()
    evidence = {
        "answer": str(answer.pk),
        "channel": answer.channel,
        "documents": len(names),
        "revision": previous.number + 1,
    }
    if enquiry.state == EnquiryState.NEEDS_INFORMATION:
        enquiry.information_received(actor=actor, reason=reason, evidence=evidence)
    revision = add_revision(
        enquiry,
        previous,
        fields=fields,
        category=previous.category,
        origin=RESIDENT,
        note=reason,
        actor=actor,
        reason=reason,
    )
    answer.enquiry = enquiry
    answer.state = AnswerState.ATTACHED
    answer.revision = revision.number
    answer.state_changed_at = timezone.now()
    answer.why = ""
    answer.save()
    signals.enquiry_action.send(
        sender=Enquiry,
        enquiry=enquiry,
        action="intake.enquiry.resident_answered",
        actor=actor,
        reason=reason,
        evidence=evidence,
    )
    return revision


def _store_files(answer, checked):
    ResidentFile.objects.bulk_create(
        ResidentFile(
            answer=answer,
            name=name,
            content_type=content_type,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            data=data,
        )
        for name, content_type, data in checked
    )


def _wait(answer, *, why, action, actor):
    answer.why = why[:300]
    answer.save()
    signals.answer_waiting.send(
        sender=ResidentAnswer,
        answer=answer,
        action=action,
        actor=actor,
        reason=why,
        evidence={
            "channel": answer.channel,
            "enquiry": answer.enquiry.reference if answer.enquiry_id else None,
        },
    )


def receive_answer(
    enquiry_id,
    *,
    channel: str,
    text: str,
    uploads: list[Upload] = (),
    sender: str = "",
    subject: str = "",
    message_id: str = "",
    in_reply_to: str = "",
    provider_token: str | None = None,
) -> ResidentAnswer:
    """Take one answer from the resident of ``enquiry_id`` (None: nobody could tell which
    enquiry; it waits in the queue). Attached when the enquiry can still change; waiting
    otherwise. AnswerRefused when what was sent breaks the rules (nothing stored)."""
    text = clean_text(text)
    checked = check_uploads(list(uploads))
    actor = actor_for(channel)
    now = timezone.now()
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id) if enquiry_id else None
        answer = ResidentAnswer.objects.create(
            enquiry=enquiry,
            channel=channel,
            state=AnswerState.UNMATCHED if enquiry is None else AnswerState.NOT_ATTACHED,
            sender=clean_text(sender, field="sender", limit=254),
            subject=clean_text(subject, field="subject", limit=SUBJECT_MAX),
            text=text,
            message_id=clean_text(message_id, field="message_id", limit=300),
            in_reply_to=clean_text(in_reply_to, field="in_reply_to", limit=300),
            provider_token=provider_token,
            received_at=now,
            state_changed_at=now,
        )
        _store_files(answer, checked)
        names = [name for name, _t, _d in checked]
        if enquiry is None:
            _wait(
                answer,
                why="No enquiry matched: it answers no message of ours and carries no signed "
                "reply address.",
                action="intake.answer.unmatched",
                actor=actor,
            )
        elif enquiry.state in ANSWERABLE:
            add_to_enquiry(
                enquiry,
                answer,
                names,
                actor=actor,
                reason=f"the resident answered ({AnswerChannel(channel).label})",
            )
        else:
            _wait(
                answer,
                why=f"{enquiry.reference} is {enquiry.get_state_display()}: an answer can no "
                "longer change it.",
                action="intake.answer.not_attached",
                actor=actor,
            )
    return answer


# --- a person's decisions on a waiting answer -------------------------------------------------


def _may_review(actor):
    if isinstance(actor, AbstractBaseUser) and not actor.has_perm("intake.review_enquiry"):
        raise PermissionDenied(f"{actor.get_username()} may not attach answers")


def attach_answer(answer_id, *, reference: str, actor, reason) -> ResidentAnswer:
    """A person attaches a waiting answer to the enquiry they name (one that can still
    change): a revision of it, as if the resident had used their page."""
    reason = require_reason(reason, actor=actor)
    _may_review(actor)
    reference = str(reference or "").strip().upper()[:32]
    target = Enquiry.objects.filter(reference=reference).values_list("pk", flat=True).first()
    if target is None:
        raise ActionRefused(f"There is no enquiry {reference!r}.")
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=target)
        answer = ResidentAnswer.objects.select_for_update().get(pk=answer_id)
        if not answer.waiting:
            raise ActionRefused("This answer is no longer waiting.")
        if enquiry.state not in ANSWERABLE:
            raise ActionRefused(
                f"{enquiry.reference} is {enquiry.get_state_display()}: an answer can no longer "
                "change it."
            )
        names = list(answer.files.values_list("name", flat=True))
        add_to_enquiry(enquiry, answer, names, actor=actor, reason=reason)
    return answer


def set_aside(answer_id, *, actor, reason) -> ResidentAnswer:
    """A person decides a waiting answer needs nothing (spam, a thank-you): it leaves the
    queue, kept, journalled."""
    reason = require_reason(reason, actor=actor)
    _may_review(actor)
    with transaction.atomic():
        answer = ResidentAnswer.objects.select_for_update().get(pk=answer_id)
        if not answer.waiting:
            raise ActionRefused("This answer is no longer waiting.")
        answer.state = AnswerState.SET_ASIDE
        answer.state_changed_at = timezone.now()
        answer.save()
        signals.answer_waiting.send(
            sender=ResidentAnswer,
            answer=answer,
            action="intake.answer.set_aside",
            actor=actor,
            reason=reason,
            evidence={"channel": answer.channel},
        )
    return answer


def assign_answer(answer_id, *, actor, reason, owner) -> ResidentAnswer:
    """Name the person who owns a waiting answer (the escalation task's hand-over)."""
    reason = require_reason(reason, actor=actor)
    with transaction.atomic():
        answer = ResidentAnswer.objects.select_for_update().get(pk=answer_id)
        if not answer.waiting:
            raise ActionRefused("This answer is no longer waiting.")
        previous = answer.owner
        answer.owner = owner
        answer.save(update_fields=["owner"])
        signals.answer_waiting.send(
            sender=ResidentAnswer,
            answer=answer,
            action="intake.answer.assigned",
            actor=actor,
            reason=reason,
            evidence={
                "from": previous.get_username() if previous else None,
                "to": owner.get_username() if owner else None,
            },
        )
    return answer


def request_new_link(enquiry: Enquiry, *, link: str) -> None:
    """The resident of an expired link asked for a new one: the layers above send it to the
    address on file (never shown here)."""
    actor = actor_for(AnswerChannel.PAGE)
    with transaction.atomic():
        locked = Enquiry.objects.select_for_update().get(pk=enquiry.pk)
        signals.enquiry_action.send(
            sender=Enquiry,
            enquiry=locked,
            action="intake.enquiry.new_link_requested",
            actor=actor,
            reason="the resident's link had expired; they asked for a new one",
            evidence={"address_on_file": bool(locked.email)},
        )
        signals.resident_link_requested.send(sender=Enquiry, enquiry=locked, link=link, actor=actor)
