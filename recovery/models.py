"""Who owns which queue, how fast it must be answered, and who has looked at it."""

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone


class Queue(models.TextChoices):
    """Every kind of work that needs a person; the console's rows carry one of these keys."""

    UNKNOWN = "unknown", "Operation outcome unknown"
    FAILED = "failed", "Operation failed"
    SUBMISSION_UNKNOWN = "submission_unknown", "Enquiry submission unknown"
    NEEDS_INFORMATION = "needs_information", "Enquiry needs information"
    UNRESOLVED = "unresolved_classification", "Classification unresolved"
    PAUSED = "paused_backlog", "Paused integration backlog"
    REVIEW = "ready_for_review", "Ready for review"
    RECEIPT_FAILING = "receipt_failing", "Receipt work failing"
    # A resident's reply nobody could match to an enquiry, or whose enquiry can no longer
    # change (intake.answers): a person attaches it or sets it aside.
    WAITING_REPLY = "waiting_reply", "Resident reply waiting"


class ResponsePolicy(models.Model):
    """Owner and response period for one queue, optionally for one integration only.

    The most specific row wins: queue + integration, then queue alone, then integration alone,
    then the default row (both blank).
    """

    queue = models.CharField(max_length=32, choices=Queue.choices, blank=True)
    integration = models.ForeignKey(
        "ledger.Integration", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    backup_owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    response_period = models.DurationField(
        default=timedelta(hours=4), help_text="How long an item may wait before it is overdue."
    )
    review_cadence = models.DurationField(
        default=timedelta(days=1),
        help_text="Someone must open this queue at least this often, or the dashboard flags it.",
    )

    class Meta:
        verbose_name_plural = "response policies"
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "integration"],
                name="response_policy_unique",
                nulls_distinct=False,
            )
        ]

    def __str__(self):
        queue = self.get_queue_display() if self.queue else "any queue"
        return f"{queue} / {self.integration or 'any integration'}"


class QueueVisit(models.Model):
    """The last time a person opened a queue (one row per person and queue)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    queue = models.CharField(max_length=32, choices=Queue.choices)
    opened_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "queue"], name="queue_visit_unique")]

    def __str__(self):
        return f"{self.user} opened {self.queue} at {self.opened_at:%Y-%m-%d %H:%M}"


class Escalation(models.Model):
    """An overdue item handed to the backup owner; unique per stay in a state, so it runs once."""

    subject_type = models.CharField(max_length=64)
    subject_id = models.CharField(max_length=64)
    queue = models.CharField(max_length=32, choices=Queue.choices)
    state_since = models.DateTimeField()
    escalated_to = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["subject_type", "subject_id", "state_since"], name="escalation_once"
            )
        ]

    def __str__(self):
        return f"{self.subject_type}:{self.subject_id} escalated at {self.at:%Y-%m-%d %H:%M}"


class DrillRun(models.Model):
    """One run of ``python manage.py drill``: its evidence report, kept as it was produced."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    integration = models.CharField(max_length=300)  # what the cases ran against
    ran_by = models.CharField(max_length=150)  # the person (or job) that ran the command
    passed = models.BooleanField()
    cases_total = models.PositiveIntegerField(default=0)
    cases_passed = models.PositiveIntegerField(default=0)
    report = models.JSONField()  # the JSON report exactly as written to --json

    class Meta:
        ordering = ["-started_at"]
        permissions = [("review_drillrun", "Can record a reviewer's conclusion on a drill run")]

    def __str__(self):
        verdict = "passed" if self.passed else "FAILED"
        return f"drill {self.started_at:%Y-%m-%d %H:%M} {verdict}"


class DrillConclusion(models.Model):
    """What a reviewer concluded about a drill run: who, when, what. Kept with the report."""

    run = models.ForeignKey(DrillRun, on_delete=models.CASCADE, related_name="conclusions")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    at = models.DateTimeField(default=timezone.now)
    conclusion = models.TextField()

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.reviewer} on {self.run}: {self.conclusion[:40]}"


class NoticePreference(models.Model):
    """Whether a person is e-mailed about work that needs them (recovery.notices); on unless
    they turn it off in the console (/console/me/)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        primary_key=True,
        on_delete=models.CASCADE,
        related_name="notice_preference",
    )
    enabled = models.BooleanField(default=True)
    changed_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"{self.user}: notices {'on' if self.enabled else 'off'}"


class OperatorNotice(models.Model):
    """One thing to tell one person (an item assigned to them, one of theirs overdue, a queue of
    theirs nobody opened, a destination refusing Handover's credentials), until a batched
    message carries it (``operation``: that message's notify.send operation)."""

    ASSIGNED, OVERDUE, UNINSPECTED, CREDENTIALS = (
        "assigned",
        "overdue",
        "uninspected",
        "credentials",
    )
    KINDS = [
        (ASSIGNED, "Assigned to you"),
        (OVERDUE, "Overdue"),
        (UNINSPECTED, "A queue of yours nobody opened"),
        (CREDENTIALS, "Credentials refused"),
    ]

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=KINDS)
    # What it is about, once: a journal row, an item's stay in a state, a queue's period.
    key = models.CharField(max_length=200, unique=True)
    # How it read when gathered (the person's own page lists it so); the message words each item
    # again from ``subject`` as it is when the message is made (recovery.digest).
    title = models.CharField(max_length=300)
    link = models.CharField(max_length=300)  # a console path; the message adds CONSOLE_URL
    # The item it is about: "operation:<id>", "enquiry:<reference>", "queue:<key>",
    # "integration:<name>"; one line per subject in a message, however many notices name it.
    subject = models.CharField(max_length=200, blank=True)
    why = models.CharField(max_length=300, blank=True)  # "Assigned to you by alex"
    # Why no message carries it: the item was resolved or given to someone else before the
    # message was made (recovery.digest); it is never sent.
    left_out = models.CharField(max_length=40, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    operation = models.ForeignKey(
        "ledger.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        indexes = [
            # The sender reads each person's notices not yet carried by a message.
            models.Index(
                fields=["user", "created_at"],
                name="notice_pending",
                condition=models.Q(operation__isnull=True),
            )
        ]

    def __str__(self):
        return f"{self.user}: {self.get_kind_display()}: {self.title}"
