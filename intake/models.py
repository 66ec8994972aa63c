import secrets
import unicodedata
import uuid

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.utils import timezone
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from intake import residentmodels  # the resident's records: Django finds them through here
from intake.search import search_document
from intake.workflow import MODEL, RESIDENT, SYSTEM

# The keyword suggester tries each active category's keywords on every enquiry: bounded so that
# a suggestion stays cheap whatever was typed or provisioned (300,000 keywords once took 11.6 s).
KEYWORDS_MAX = 200
KEYWORD_MAX_LENGTH = 100


def keyword_problem(keywords: str) -> str:
    """Why ``keywords`` (one per line) cannot be kept, in words naming the limit; or ""."""
    words = [k.strip() for k in keywords.splitlines() if k.strip()]
    if len(words) > KEYWORDS_MAX:
        return f"At most {KEYWORDS_MAX} keywords (there are {len(words)})."
    long = next((k for k in words if len(k) > KEYWORD_MAX_LENGTH), None)
    if long is not None:
        return (
            f"Each keyword at most {KEYWORD_MAX_LENGTH} characters "
            f"({long[:40]!r}... has {len(long)})."
        )
    if any(unicodedata.category(ch) == "Cc" and ch not in "\r\n" for ch in keywords):
        return "Remove the control character: write one keyword or phrase per line."
    return ""


class Category(models.Model):
    """A service category admins configure; only active ones may be suggested or routed to."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    active = models.BooleanField(default=True)
    # The deterministic keyword suggester's configuration: one keyword or phrase per line.
    keywords = models.TextField(blank=True, help_text="One keyword or phrase per line.")
    # An admin marks the categories whose enquiries need a visit: their review page shows the
    # next free appointment slots (ledger.services.appointments).
    books_appointments = models.BooleanField(
        "needs a visit",
        default=False,
        help_text="Enquiries in this category need a visit: the review page shows the next "
        "free appointment slots from the appointments calendar.",
    )
    # Off for a category whose residents are told by another route (a service that writes to
    # them itself): Handover sends them nothing, and each enquiry's journal says so.
    tells_resident = models.BooleanField(
        "e-mails the resident",
        default=True,
        help_text="Handover e-mails the resident at each step (received, more information "
        "needed, passed on, not taken forward, closed). Off: nothing is sent, and each "
        "enquiry's journal says why.",
    )

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "categories"

    def __str__(self):
        return self.name if self.active else f"{self.name} (retired)"

    def clean(self):
        problem = keyword_problem(self.keywords or "")
        if problem:
            raise ValidationError({"keywords": problem})

    def keyword_list(self):
        # Bounded here too, for a row stored before the bounds.
        words = [k.strip().lower() for k in self.keywords.splitlines() if k.strip()]
        return [k for k in words if len(k) <= KEYWORD_MAX_LENGTH][:KEYWORDS_MAX]


class EnquiryState(models.TextChoices):
    RECEIVED = "received"
    VALIDATED = "validated"
    READY_FOR_REVIEW = "ready_for_review", "ready for review"
    NEEDS_INFORMATION = "needs_information", "needs information"
    APPROVED = "approved"
    SUBMITTED = "submitted"
    SUBMISSION_UNKNOWN = "submission_unknown", "submission unknown"
    CONFIRMED = "confirmed"
    REJECTED = "rejected"


OPEN_STATES = [s for s in EnquiryState if s not in (EnquiryState.CONFIRMED, EnquiryState.REJECTED)]


def new_reference() -> str:
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: read aloud on the phone
    return "ENQ-" + "".join(secrets.choice(alphabet) for _ in range(8))


class Enquiry(ConcurrentTransitionMixin, models.Model):
    """One run of the workflow: a stable ID, its source event and everything decided about it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    reference = models.CharField(max_length=32, unique=True, default=new_reference)
    source = models.CharField(max_length=64)
    workflow_version = models.CharField(max_length=32, default="")
    # Personal fields: redacted by purge_personal_data after retention (redacted_at set).
    name = models.CharField(max_length=200, blank=True)
    email = models.EmailField(blank=True, db_index=True)
    phone = models.CharField(max_length=40, blank=True)
    subject = models.CharField(max_length=200, blank=True)
    # The customer's own words: never overwritten (only redacted after retention).
    message = models.TextField()
    service_hint = models.CharField(max_length=120, blank=True)
    consent = models.BooleanField(default=False)
    documents = models.JSONField(default=list, blank=True)
    category = models.ForeignKey(Category, null=True, blank=True, on_delete=models.PROTECT)
    state = FSMField(
        default=EnquiryState.RECEIVED, choices=EnquiryState.choices, protected=True, db_index=True
    )
    current_revision = models.PositiveIntegerField(default=1)
    # Binds the resident's links to it (intake.residentlink): a new value revokes them all.
    resident_secret = models.CharField(max_length=32, default=residentmodels.new_resident_secret)
    approved_revision = models.PositiveIntegerField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    state_changed_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    redacted_at = models.DateTimeField(null=True, blank=True)
    # Set at receipt, in the event's transaction; cleared, under the enquiry's row lock, once the
    # layers above have taken the receipt up (ledger.receipt: its suggestion, extractions and
    # acknowledgement proposed). A row still set long after receipt is work a lost task left.
    receipt_pending = models.BooleanField(default=False)
    # How often taking the receipt up has failed, and the last error (ledger.receipt): after a
    # few failures the enquiry is a row in the console's queue ("Receipt work failing").
    receipt_failures = models.PositiveSmallIntegerField(default=0)
    receipt_error = models.CharField(max_length=500, blank=True)
    # The console's enquiry search. Stored, not an expression index: with an expression index
    # PostgreSQL recomputes to_tsvector for every candidate row to filter it (6.7 s for a word
    # in 148,000 of 200,000 enquiries, docs/benchmarks.md); stored, it reads the value. Written
    # by PostgreSQL on every insert and update, so a purge's redaction leaves the search too.
    search_vector = models.GeneratedField(
        expression=search_document(), output_field=SearchVectorField(), db_persist=True
    )

    class Meta:
        verbose_name_plural = "enquiries"
        indexes = [
            # The console's queue page (recovery.queue.sources): each enquiry queue is read
            # oldest first with a LIMIT, and the stuck-submission pass reads only those older
            # than a bound. Without it each read sorted every enquiry in that state.
            models.Index(
                fields=["state", "state_changed_at"],
                name="enquiry_queue",
                condition=models.Q(
                    state__in=["needs_information", "submission_unknown", "ready_for_review"]
                ),
            ),
            # The console's enquiry search (recovery.views.queue.search).
            GinIndex(fields=["search_vector"], name="enquiry_search"),
            # ledger.sweeper: receipts not taken up yet (a handful at any time, none at rest).
            models.Index(
                fields=["created_at"],
                name="enquiry_receipt_pending",
                condition=models.Q(receipt_pending=True),
            ),
        ]
        permissions = [
            ("review_enquiry", "Can review enquiries: edit, request information, reject"),
            ("approve_revision", "Can approve a revision for delivery"),
            ("complete_enquiry", "Can mark an enquiry delivered by hand or withdraw it"),
        ]

    def __str__(self):
        return self.reference

    def save(self, *args, **kwargs):
        self.before_write(kwargs.get("update_fields"))
        super().save(*args, **kwargs)
        self.after_write()

    # Run by save() and by config.roundtrip's written-out INSERT and UPDATE alike.
    def before_write(self, fields):
        loaded = getattr(self, "_loaded_message", None)
        if loaded is not None and self.message != loaded and not self.redacted_at:
            raise ValueError("An enquiry's original message is never overwritten.")

    def after_write(self):
        self._loaded_message = self.message

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        instance._loaded_message = instance.__dict__.get("message")
        return instance

    @property
    def revision(self):
        return self.revisions.get(number=self.current_revision)

    # --- transitions: people need `permission`; workers, models and residents their prefix in
    # custom["actors"]. Bodies check what the state cannot (who edited), before it moves.

    @transition(
        state,
        source=EnquiryState.RECEIVED,
        target=EnquiryState.VALIDATED,
        custom={"actors": (SYSTEM,)},
    )
    def validate(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=EnquiryState.VALIDATED,
        target=EnquiryState.READY_FOR_REVIEW,
        custom={"actors": (SYSTEM, MODEL)},
    )
    def mark_ready_for_review(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        # From approved or submitted only through ledger.services.request_information, which
        # first cancels the CRM write the destination refused as invalid (the data is the
        # resident's to give): intake knows nothing of writes.
        source=[
            EnquiryState.VALIDATED,
            EnquiryState.READY_FOR_REVIEW,
            EnquiryState.APPROVED,
            EnquiryState.SUBMITTED,
        ],
        target=EnquiryState.NEEDS_INFORMATION,
        permission="intake.review_enquiry",
    )
    def request_information(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=EnquiryState.NEEDS_INFORMATION,
        target=EnquiryState.READY_FOR_REVIEW,
        permission="intake.review_enquiry",
        custom={"actors": (SYSTEM, RESIDENT)},
    )
    def information_received(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=[
            EnquiryState.VALIDATED,
            EnquiryState.READY_FOR_REVIEW,
            EnquiryState.NEEDS_INFORMATION,
            EnquiryState.APPROVED,
        ],
        target=EnquiryState.READY_FOR_REVIEW,
        permission="intake.review_enquiry",
    )
    def revise(self, *, actor, reason="", evidence=None):
        """A new revision: any earlier approval does not carry over."""
        self.approved_revision = None

    @transition(
        state,
        source=EnquiryState.READY_FOR_REVIEW,
        target=EnquiryState.APPROVED,
        permission="intake.approve_revision",
    )
    def approve(self, *, actor, reason="", evidence=None):
        revision = self.revision
        if revision.created_by_id is not None and revision.created_by_id == actor.pk:
            raise PermissionDenied("A reviewer may not approve a revision they edited themselves.")
        self.approved_revision = revision.number
        # Who approved which revision, and when, belongs to the revision; the journal (written in
        # this same transaction) keeps the event.
        Revision.objects.filter(pk=revision.pk).update(
            approved_by=actor, approved_at=timezone.now()
        )

    @transition(
        state,
        source=[
            EnquiryState.VALIDATED,
            EnquiryState.READY_FOR_REVIEW,
            EnquiryState.NEEDS_INFORMATION,
        ],
        target=EnquiryState.REJECTED,
        permission="intake.review_enquiry",
    )
    def reject(self, *, actor, reason="", evidence=None):
        self.closed_at = timezone.now()

    @transition(
        state,
        source=EnquiryState.APPROVED,
        target=EnquiryState.SUBMITTED,
        custom={"actors": (SYSTEM,)},
    )
    def submit(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=EnquiryState.SUBMITTED,
        target=EnquiryState.SUBMISSION_UNKNOWN,
        custom={"actors": (SYSTEM,)},
    )
    def mark_submission_unknown(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=[EnquiryState.SUBMITTED, EnquiryState.SUBMISSION_UNKNOWN],
        target=EnquiryState.APPROVED,
        permission="intake.complete_enquiry",
        custom={"actors": (SYSTEM,)},
    )
    def delivery_failed(self, *, actor, reason="", evidence=None):
        """The write is known not to have happened: the approved revision waits for a person."""

    @transition(
        state,
        source=[EnquiryState.APPROVED, EnquiryState.SUBMITTED, EnquiryState.SUBMISSION_UNKNOWN],
        target=EnquiryState.CONFIRMED,
        permission="intake.complete_enquiry",
        custom={"actors": (SYSTEM,)},
    )
    def confirm(self, *, actor, reason="", evidence=None):
        self.closed_at = timezone.now()

    # Ending an approved enquiry undelivered is a reviewer's decision, as rejecting one is
    # (issue 19): a coordinator's triage of the CRM write cannot close the enquiry.
    @transition(
        state,
        source=[EnquiryState.APPROVED, EnquiryState.SUBMISSION_UNKNOWN],
        target=EnquiryState.REJECTED,
        permission="intake.review_enquiry",
    )
    def withdraw(self, *, actor, reason="", evidence=None):
        """Delivery is cancelled for good. From submission_unknown only when no record was seen
        at the destination (ledger.policies offers no Cancel then); the evidence says whether an
        earlier request may have reached it."""
        self.closed_at = timezone.now()


class Revision(models.Model):
    """The fields that will be written to the CRM, numbered; approval belongs to one revision."""

    enquiry = models.ForeignKey(Enquiry, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    fields = models.JSONField(default=dict)
    category = models.ForeignKey(Category, null=True, blank=True, on_delete=models.PROTECT)
    origin = models.CharField(max_length=32, default="intake")  # intake, reviewer, extraction
    note = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["enquiry", "number"]
        constraints = [
            models.UniqueConstraint(fields=["enquiry", "number"], name="revision_number_unique")
        ]

    def __str__(self):
        return f"{self.enquiry.reference} r{self.number}"


class IntakeEvent(models.Model):
    """A signed delivery; (source, event_id) is the event's identity, unique in the database."""

    source = models.CharField(max_length=64)
    event_id = models.CharField(max_length=255)
    received_at = models.DateTimeField(default=timezone.now)
    body = models.TextField()
    body_sha256 = models.CharField(max_length=64)
    enquiry = models.OneToOneField(
        Enquiry, null=True, blank=True, on_delete=models.PROTECT, related_name="event"
    )
    deliveries = models.PositiveIntegerField(default=1)
    last_delivery_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["source", "event_id"], name="intake_event_identity")
        ]

    def __str__(self):
        return f"{self.source}/{self.event_id}"


class EventConflict(models.Model):
    """The same event ID arrived with a different body: refused (409) and kept as evidence."""

    event = models.ForeignKey(IntakeEvent, on_delete=models.CASCADE, related_name="conflicts")
    received_at = models.DateTimeField(default=timezone.now)
    body_sha256 = models.CharField(max_length=64)
    body = models.TextField()

    def __str__(self):
        return f"conflict on event {self.event_id} at {self.received_at:%Y-%m-%d %H:%M:%S}"


class Suggestion(models.Model):
    """One bounded classification: the raw output and what validation made of it."""

    UNRESOLVED = "unresolved"

    enquiry = models.ForeignKey(Enquiry, on_delete=models.CASCADE, related_name="suggestions")
    revision = models.PositiveIntegerField()
    provider = models.CharField(max_length=32)
    model = models.CharField(max_length=120, blank=True)
    prompt_version = models.CharField(max_length=32, blank=True)
    raw_output = models.TextField(blank=True)
    label = models.CharField(max_length=64)  # an active category slug, or "unresolved"
    category = models.ForeignKey(Category, null=True, blank=True, on_delete=models.PROTECT)
    confidence = models.FloatField(null=True, blank=True)
    validation = models.CharField(max_length=200)  # "valid" or why it was turned away
    explanation = models.TextField(blank=True)  # stored beside the message, never over it
    created_at = models.DateTimeField(default=timezone.now)
    # Filled by review: accepted as is, overridden, or left unresolved (classification quality).
    review_outcome = models.CharField(max_length=16, blank=True)
    # The revision this suggestion's category was written into (None: stored, not applied).
    applied_revision = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.provider}: {self.label} ({self.validation})"

    @property
    def unresolved(self):
        return self.label == self.UNRESOLVED


class Document(models.Model):
    """An attached document version and what extraction proposed from it."""

    enquiry = models.ForeignKey(Enquiry, on_delete=models.CASCADE, related_name="attached")
    document_id = models.CharField(max_length=200)
    version = models.CharField(max_length=80)  # intake.payload.DOCUMENT_VERSION_MAX
    # pending, extracted, access_denied (401/403), changed (no longer this version), failed
    status = models.CharField(max_length=20, default="pending")
    # The read's own fields (a PDF form's), replaced by each read of this version.
    extracted = models.JSONField(default=dict, blank=True)
    # A document that is not a form: its text, for the reviewer (never sent anywhere).
    text = models.TextField(blank=True)
    content_type = models.CharField(max_length=100, blank=True)
    error = models.TextField(blank=True)
    # A reviewer's corrections, field -> value: kept apart from `extracted`, so no read ever
    # overwrites one; they win wherever the fields are used (``fields``).
    corrected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    corrected = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["enquiry", "document_id", "version"], name="document_version_unique"
            )
        ]

    def __str__(self):
        return f"{self.document_id} v{self.version} ({self.status})"

    @property
    def fields(self) -> dict:
        """The document's fields as Handover uses them: extracted, each corrected one the
        reviewer's value."""
        return {**self.extracted, **self.corrected}
