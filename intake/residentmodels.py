"""What residents send back, and the bounds kept on how often they may: the records of the
resident's side of the conversation (intake.answers writes them).

Defined apart from intake.models (which imports this module at its end, so Django finds the
models) because that module is at its size limit; every foreign key names its model by label.
"""

import secrets
import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


def new_resident_secret() -> str:
    """An enquiry's ``resident_secret`` (intake.residentlink)."""
    return secrets.token_urlsafe(16)


class AnswerState(models.TextChoices):
    ATTACHED = "attached", "attached to its enquiry"
    # Nobody could tell which enquiry it belongs to: in the console's queue, with an owner.
    UNMATCHED = "unmatched", "waiting: no enquiry matched"
    # Matched, but its enquiry can no longer take an answer (passed on, closed): in the queue.
    NOT_ATTACHED = "not_attached", "waiting: its enquiry can no longer be changed"
    SET_ASIDE = "set_aside", "set aside by a person"


class AnswerChannel(models.TextChoices):
    PAGE = "page", "the resident page"
    EMAIL = "email", "an e-mail reply"
    INTAKE = "intake", "a new enquiry quoting the reference"


WAITING = [AnswerState.UNMATCHED, AnswerState.NOT_ATTACHED]


class ResidentAnswer(models.Model):
    """One answer from a resident: through their page, by e-mail, or a new enquiry a reviewer
    attached as a reply. Attached, it is a revision of its enquiry (``revision``); waiting, it
    is a row in the console's queue ("Replies nobody could match") until a person attaches it
    or sets it aside. Never dropped, never attached to a guessed enquiry."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    enquiry = models.ForeignKey(
        "intake.Enquiry", null=True, blank=True, on_delete=models.PROTECT, related_name="answers"
    )
    channel = models.CharField(max_length=16, choices=AnswerChannel.choices)
    state = models.CharField(max_length=16, choices=AnswerState.choices)
    revision = models.PositiveIntegerField(null=True, blank=True)
    # Personal: the sender's address (an e-mail's From), its subject and text.
    sender = models.CharField(max_length=254, blank=True)
    subject = models.CharField(max_length=300, blank=True)
    text = models.TextField(blank=True)
    # Why it waits, in the console's words (never shown to the resident).
    why = models.CharField(max_length=300, blank=True)
    # An e-mail's own Message-ID and what it answered (In-Reply-To), as evidence.
    message_id = models.CharField(max_length=300, blank=True)
    in_reply_to = models.CharField(max_length=300, blank=True)
    # The provider's one-time token for this delivery (Mailgun's "token"), or the page form's
    # one-time key ("page:<hex>", ledger.residentpage): unique, so a replayed or redelivered
    # post, or a form sent twice, is taken once.
    provider_token = models.CharField(max_length=200, null=True, blank=True, unique=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    received_at = models.DateTimeField(default=timezone.now)
    state_changed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # The console's queue (recovery.queue.sources): the waiting answers, oldest first.
            models.Index(
                fields=["state", "state_changed_at"],
                name="answer_waiting",
                condition=models.Q(state__in=["unmatched", "not_attached"]),
            )
        ]

    def __str__(self):
        return f"answer {str(self.pk)[:8]} ({self.get_state_display()})"

    @property
    def waiting(self) -> bool:
        return self.state in WAITING


class ResidentFile(models.Model):
    """A document a resident uploaded with an answer (page or e-mail attachment), kept in the
    database within intake.answers' limits (size, count, type read from its first bytes)."""

    answer = models.ForeignKey(ResidentAnswer, on_delete=models.CASCADE, related_name="files")
    name = models.CharField(max_length=200)
    content_type = models.CharField(max_length=100)
    size = models.PositiveIntegerField()
    sha256 = models.CharField(max_length=64)
    data = models.BinaryField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"{self.name} ({self.size} bytes)"


class Throttle(models.Model):
    """How many times one key (a link, an address, a client) was used in one window: a bound
    that holds across every web process (intake.answers.throttle)."""

    key = models.CharField(max_length=200)
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "window_start"], name="throttle_key_window")
        ]

    def __str__(self):
        return f"{self.key} @ {self.window_start:%H:%M}: {self.count}"
