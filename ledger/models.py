import hashlib
import json
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from django_fsm import ConcurrentTransitionMixin, FSMField, transition

from config.destinations import validate_address
from intake.models import Enquiry
from intake.workflow import SYSTEM
from ledger import messages
from ledger.rates import checked_rate


def _reason_lookups(kwargs: dict) -> tuple[list, dict]:
    """``reason=`` (and ``reason__…``) in a filter: the system's reason in the row, a person's
    beside it (ErasableReason), or a person's written before it was kept apart."""
    conditions, rest = [], {}
    for key, value in kwargs.items():
        if key != "reason" and not key.startswith("reason__"):
            rest[key] = value
            continue
        suffix = key[len("reason") :]
        conditions.append(
            models.Q(actor_user__isnull=True, **{f"kept_reason{suffix}": value})
            | models.Q(**{f"erasable__text{suffix}": value})
            | models.Q(erasable__isnull=True, **{f"kept_reason{suffix}": value})
        )
    return conditions, rest


class JournalQuerySet(models.QuerySet):
    def filter(self, *args, **kwargs):
        conditions, kwargs = _reason_lookups(kwargs)
        return super().filter(*args, *conditions, **kwargs)

    def exclude(self, *args, **kwargs):
        conditions, kwargs = _reason_lookups(kwargs)
        return super().exclude(*args, *conditions, **kwargs)

    def _with_reason(self, fields):
        if "reason" not in fields:
            return self
        erased = "(reason erased: retention period)"
        return self.annotate(
            reason=models.Case(
                models.When(erasable__erased_at__isnull=False, then=models.Value(erased)),
                models.When(erasable__isnull=False, then=models.F("erasable__text")),
                default=models.F("kept_reason"),
                output_field=models.TextField(),
            )
        )

    def values(self, *fields, **expressions):
        return super(JournalQuerySet, self._with_reason(fields)).values(*fields, **expressions)

    def values_list(self, *fields, **kwargs):
        return super(JournalQuerySet, self._with_reason(fields)).values_list(*fields, **kwargs)

    def update(self, **kwargs):
        raise PermissionError("The journal is append-only.")

    def delete(self):
        raise PermissionError("The journal is append-only.")


class JournalManager(models.Manager.from_queryset(JournalQuerySet)):
    def get_queryset(self):
        # A person's reason is kept beside the row (ErasableReason): read with it, one query.
        return super().get_queryset().select_related("erasable")


class JournalEntry(models.Model):
    """One row per change of state or operator action, written in the same transaction.

    Append-only: the model refuses update and delete, and a PostgreSQL trigger (migration 0001)
    refuses UPDATE, DELETE and TRUNCATE for everyone who reaches the table directly.

    A person's free-text reason can hold personal data, and this row can never be changed: so
    it is kept beside the row, in ErasableReason, which the purge empties after the retention
    period. ``reason`` reads whichever holds it; who, when and which action stay here for good.
    """

    at = models.DateTimeField(default=timezone.now, db_index=True)
    subject_type = models.CharField(max_length=64)  # "intake.enquiry", "ledger.operation", ...
    subject_id = models.CharField(max_length=64)
    # Every row belongs to an enquiry where there is one, so its page reads one index.
    enquiry = models.ForeignKey(
        Enquiry, null=True, blank=True, on_delete=models.PROTECT, related_name="journal"
    )
    action = models.CharField(max_length=100)  # dotted: "intake.enquiry.approve"
    request_id = models.CharField(max_length=64, blank=True)
    from_state = models.CharField(max_length=32, blank=True)
    to_state = models.CharField(max_length=32, blank=True)
    actor = models.CharField(max_length=150)  # user:<name>, system:<worker>, model:<name@v>
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # A system's reason (no personal data); a person's is in ErasableReason. Read ``reason``.
    kept_reason = models.TextField(blank=True, db_column="reason")
    evidence = models.JSONField(default=dict, blank=True)

    objects = JournalManager()

    class Meta:
        ordering = ["at", "id"]
        verbose_name_plural = "journal entries"
        indexes = [
            # The item page reads one subject's history in order.
            models.Index(fields=["subject_type", "subject_id", "at"], name="journal_subject"),
        ]

    def __str__(self):
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.from_state}->{self.to_state}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise PermissionError("The journal is append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("The journal is append-only.")

    @property
    def reason(self) -> str:
        if self.actor_user_id is None:
            return self.kept_reason
        try:
            return self.erasable.shown()
        except ErasableReason.DoesNotExist:
            return self.kept_reason

    @reason.setter
    def reason(self, value):
        self.kept_reason = value or ""


class ErasableReason(models.Model):
    """A person's reason for a journal row, kept apart so it can be erased after the retention
    period (ledger.purge) while the row (who, when, which action, evidence) stays unchanged."""

    entry = models.OneToOneField(
        JournalEntry, primary_key=True, on_delete=models.PROTECT, related_name="erasable"
    )
    text = models.TextField(blank=True)
    erased_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"reason for journal row {self.entry_id}"

    def shown(self) -> str:
        if self.erased_at is None:
            return self.text
        return f"(reason erased {self.erased_at:%Y-%m-%d}: retention period)"


class PurgeRun(models.Model):
    """One run of the personal-data purge (ledger.purge): when, by what, what it removed."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    ran_by = models.CharField(max_length=100)  # "schedule" or the command
    retention_days = models.PositiveIntegerField()
    candidates = models.PositiveIntegerField(default=0)
    redacted = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    reasons_erased = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self):
        return f"purge {self.started_at:%Y-%m-%d %H:%M}: {self.redacted} redacted"


# --- kinds of destination API ----------------------------------------------------------------
# Which API a destination speaks (its connectors, what it can do, how it is checked) is the
# destinations layer's: ledger.kinds registers every kind here when it is imported, and
# LedgerConfig.ready imports it. This module imports no connector, so adding a kind touches
# nothing below ledger.kinds: not this model, not a migration (the field's choices are
# kind_choices, read when they are used).
KINDS: dict = {}  # key -> ledger.kinds.Kind
KIND_LABELS: dict[str, str] = {}  # key -> what a form shows
DEFAULT_KIND = "handover"


def register_kinds(kinds: dict, labels: dict[str, str]) -> None:
    KINDS.update(kinds)
    KIND_LABELS.update(labels)


def kind_choices() -> list[tuple[str, str]]:
    return list(KIND_LABELS.items())


def kind_of(integration):
    try:
        return KINDS[integration.kind]
    except KeyError:
        raise LookupError(f"unknown integration kind {integration.kind!r}") from None


# A read's maximum age: at least 10 s (every worker can re-read within it), at most a day.
MAX_AGE_BOUNDS = (10.0, 86400.0)


class Integration(models.Model):
    """An external system Handover writes to or reads from, and how carefully."""

    CRM, NOTIFY, DOCUMENTS, APPOINTMENTS = "crm", "notify", "documents", "appointments"
    NAMES = [
        (CRM, "CRM"),
        (NOTIFY, "Notifications"),
        (DOCUMENTS, "Documents"),
        (APPOINTMENTS, "Appointments"),
    ]

    name = models.SlugField(unique=True, choices=NAMES)
    # Which API the destination speaks: its connectors and what it can do (ledger.kinds).
    kind = models.CharField(
        max_length=20,
        choices=kind_choices,
        default=DEFAULT_KIND,
        help_text="The API the destination speaks (docs/connectors.md).",
    )
    # One rule for every way an address arrives (config.destinations): http(s), or smtp:// and its
    # kin for an e-mail relay; a host, a valid port, no credentials. Which scheme fits is the
    # kind's to say (Kind.validate).
    base_url = models.CharField(max_length=200, validators=[validate_address])
    token = models.CharField(max_length=200, blank=True)
    timeout_seconds = models.FloatField(default=10.0)
    retry_budget = models.PositiveIntegerField(default=3, help_text="Attempts before 'failed'.")
    backoff_seconds = models.FloatField(default=2.0, help_text="First retry delay; doubles.")
    # Capabilities as configured: they can only narrow what the kind declares. Read
    # ``capabilities`` (the effective values), never these fields, to decide anything.
    supports_lookup = models.BooleanField(
        default=True, help_text="Off: an uncertain write waits for a person instead of a look-up."
    )
    supports_idempotency_key = models.BooleanField(
        default=True, help_text="Ignored where the kind's API has no idempotency key."
    )
    settle_delay_seconds = models.FloatField(
        default=0.0,
        help_text="How long the destination's search may lag its writes; never less than the "
        "kind's own minimum.",
    )
    # How old a read may be before it is read again (appointment slots); reads only.
    max_age_seconds = models.FloatField(
        default=300.0,
        help_text="How old a read (appointment slots) may be before it is read again; older "
        "is shown as stale.",
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    pause_reason = models.TextField(blank=True)
    # Resuming does not release the backlog: an admin reviews it first (ledger.services).
    awaiting_backlog_review = models.BooleanField(default=False)
    # Limits that hold across every worker on every machine (ledger.limits). Empty: none.
    max_requests_per_second = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.0)],
        help_text="Calls per second to this destination, from all workers together "
        "(writes, look-ups and reads alike). Empty or 0: no limit.",
    )
    max_in_flight = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Calls waiting for this destination's answer at once. Empty: no limit.",
    )
    # Reads from this destination in flight at once, from all workers together (ledger.reads):
    # a share of the workers, so that reads never take every one from writes and messages.
    read_share = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Reads from this destination in flight at once, from all workers together. "
        "Empty: READS_MAX_IN_FLIGHT (one fewer than a cluster's workers), never more.",
    )
    # Set when the destination answers 429 (or 503 with Retry-After): nothing is sent to it
    # before this time. Written by ledger.limits.throttle() alone, never by a form.
    throttled_until = models.DateTimeField(null=True, blank=True, editable=False)
    throttle_reason = models.CharField(max_length=300, blank=True, editable=False)

    class Meta:
        permissions = [("pause_integration", "Can pause and resume an integration")]

    def __str__(self):
        return self.get_name_display()

    # What an admin may change (recovery's integration form lists the same; the token's value
    # is never journalled). Pause state is not here: it has its own actions with a reason.
    CONFIGURABLE = (
        "kind",
        "base_url",
        "token",
        "owner",
        "timeout_seconds",
        "retry_budget",
        "backoff_seconds",
        "supports_lookup",
        "supports_idempotency_key",
        "settle_delay_seconds",
        "max_age_seconds",
        "max_requests_per_second",
        "max_in_flight",
        "read_share",
    )
    SECRET_FIELDS = ("token",)
    # Integrations Handover reads from (their reads take a share of the workers: ledger.reads).
    READ_FROM = (DOCUMENTS, APPOINTMENTS)

    @property
    def capabilities(self):
        """What this integration can do: its kind's declaration narrowed by this row."""
        return kind_of(self).capabilities(self)

    def clean(self):
        errors = {}
        # The order config/checks.py enforces for the default: connector timeout < the
        # cluster's timeout < its retry. A call that can outlive the cluster's timeout is killed
        # mid-flight every time; a timeout that reaches the retry hands the same task to a
        # second worker while the first still runs.
        cluster_timeout = settings.Q_CLUSTER.get("timeout")
        retry = settings.Q_CLUSTER.get("retry")
        if self.timeout_seconds is not None and self.timeout_seconds <= 0:
            errors["timeout_seconds"] = messages.TIMEOUT_NOT_POSITIVE
        elif (
            cluster_timeout is not None
            and self.timeout_seconds is not None
            and self.timeout_seconds >= cluster_timeout
        ):
            errors["timeout_seconds"] = messages.TIMEOUT_NOT_UNDER_CLUSTER % {
                "timeout": cluster_timeout
            }
        if self.max_age_seconds is not None and not (
            MAX_AGE_BOUNDS[0] <= self.max_age_seconds <= MAX_AGE_BOUNDS[1]
        ):
            errors["max_age_seconds"] = messages.MAX_AGE_OUT_OF_BOUNDS
        if cluster_timeout is not None and retry is not None and cluster_timeout >= retry:
            errors["__all__"] = messages.CLUSTER_TIMEOUT_NOT_UNDER_RETRY % {
                "timeout": cluster_timeout,
                "retry": retry,
            }
        reads = int(getattr(settings, "READS_MAX_IN_FLIGHT", 1))
        if self.read_share is not None and not 1 <= self.read_share <= reads:
            errors["read_share"] = messages.READ_SHARE_OUT_OF_BOUNDS % {"most": reads}
        try:
            checked_rate(self.max_requests_per_second)
        except ValueError as exc:
            errors.setdefault("max_requests_per_second", str(exc))
        kind = KINDS.get(self.kind)
        if kind is not None:  # an unknown kind is the choices' error already
            for field_name, message in kind.validate(self).items():
                errors.setdefault(field_name, message)
        if errors:
            raise ValidationError(errors)


class LimiterState(models.Model):
    """An integration's pace, shared by every worker (ledger.limits): one row, locked briefly.

    ``next_slot_at``: the earliest time the next call may start. ``queue_until``: the last
    time handed to an operation told to come back later, so that those come back one slot
    apart, in the order they were told, instead of all at once.
    """

    integration = models.OneToOneField(
        Integration, primary_key=True, on_delete=models.CASCADE, related_name="+"
    )
    next_slot_at = models.DateTimeField(null=True, blank=True)
    queue_until = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.integration_id}: next slot {self.next_slot_at}"


class InFlightSlot(models.Model):
    """One call in flight to a limited integration: a lease, so a killed worker's slot comes
    back when it expires (or sooner, when its process on this host is gone)."""

    integration = models.ForeignKey(Integration, on_delete=models.CASCADE, related_name="+")
    holder = models.CharField(max_length=120)
    operation_id = models.UUIDField(null=True, blank=True)
    acquired_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["integration", "expires_at"], name="in_flight_live")]

    def __str__(self):
        return f"{self.integration_id}: {self.holder} until {self.expires_at}"


class Action:
    """Every kind of external action the ledger records (``Operation.action``), named once:
    code says ``Action.CREATE_ENQUIRY``, never the string. ledger.policies says what each is;
    LABELS is what a person reads."""

    SUGGEST_CATEGORY = "suggest.category"
    READ_APPOINTMENTS = "appointments.read"
    EXTRACT_DOCUMENT = "documents.extract"
    CREATE_ENQUIRY = "crm.create_enquiry"
    CLOSE_ENQUIRY = "crm.close_enquiry"
    SEND_NOTICE = "notify.send"
    LABELS = {
        CREATE_ENQUIRY: "Create the enquiry in the CRM",
        CLOSE_ENQUIRY: "Close the enquiry in the CRM (compensation)",
        SEND_NOTICE: "Send a message to the resident",
        SUGGEST_CATEGORY: "Suggest a category",
        EXTRACT_DOCUMENT: "Read an attached document",
        READ_APPOINTMENTS: "Read appointment slots",
    }


class OperationState(models.TextChoices):
    PROPOSED = "proposed"
    APPROVED = "approved"
    SUBMITTED = "submitted"
    CONFIRMED = "confirmed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"


UNRESOLVED_OPERATION_STATES = [OperationState.FAILED, OperationState.UNKNOWN]


def payload_hash(payload) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


# Cancelling the CRM write of an enquiry waiting on it ends the enquiry (withdrawn: Rejected,
# not delivered). Ending an enquiry is a reviewer's decision, not a coordinator's triage.
ENDS_ENQUIRY_PERMISSION = "intake.review_enquiry"
CANCEL_PERMISSION = "ledger.triage_operation"


# Retrying a failed write needs the recovery permission (admins), except where the destination
# never received it: every call was refused before it was accepted (connection refused,
# 502/503/504) until the retry budget ran out. A retry with the same idempotency key cannot
# duplicate what was never received, so whoever owns failed work (a coordinator) may retry it:
# it is the most common failure, and the one the Operation failed queue's owner must clear.
# docs/runbooks/destination-unavailable.md and the roles in README.md say the same.
RETRY_PERMISSION = "ledger.recover_operation"
RETRY_NEVER_RECEIVED_PERMISSION = "ledger.triage_operation"


def never_received(op) -> bool:
    """Failed because the destination was unavailable on every allowed attempt, each refused
    before it was accepted (transient): nothing reached it. From the row's own columns, so a
    queue page decides it for every row without a query."""
    return (
        op.state == OperationState.FAILED
        and op.attention == "retry_budget_exhausted"
        and op.last_error_class == "transient"
    )


def retry_permission(op) -> str:
    return RETRY_NEVER_RECEIVED_PERMISSION if never_received(op) else RETRY_PERMISSION


def _may_retry(op, user) -> bool:
    return user.has_perm(retry_permission(op))


_may_retry.label = "recover_operation / triage_operation if never received"


def cancel_permission(op) -> str:
    return ENDS_ENQUIRY_PERMISSION if op.ends_enquiry() else CANCEL_PERMISSION


def _may_cancel(op, user) -> bool:
    return user.has_perm(cancel_permission(op))


_may_cancel.label = "triage_operation / review_enquiry if it ends the enquiry"


class Operation(ConcurrentTransitionMixin, models.Model):
    """One external action, recorded before it is attempted; the ledger is the truth."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # None for a message to an operator (recovery.notices: a batch of items for one person),
    # which belongs to no enquiry.
    enquiry = models.ForeignKey(
        Enquiry, null=True, blank=True, on_delete=models.PROTECT, related_name="operations"
    )
    action = models.CharField(max_length=40)  # a key of ledger.policies.POLICIES
    revision = models.PositiveIntegerField()
    # <enquiry id>:<action>:r<revision>; made once, reused on every attempt.
    # Every key Handover builds must fit this column (ledger.proposals._operation_key
    # digests what a sender could make too long).
    KEY_MAX_LENGTH = 200
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH, unique=True)
    payload = models.JSONField(default=dict)
    payload_hash = models.CharField(max_length=64)
    # None for work that leaves Handover through no integration row (the suggester runs
    # intake's configured provider in a worker).
    integration = models.ForeignKey(
        Integration, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    state = FSMField(
        default=OperationState.PROPOSED, choices=OperationState.choices, protected=True
    )
    compensates = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="compensations"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    attempt_count = models.PositiveIntegerField(default=0)
    # Calls made against the retry budget; a person's retry starts a fresh budget.
    budget_used = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    task_enqueued_at = models.DateTimeField(null=True, blank=True)
    # Who is working on the row right now (a call or a lookup) and until when; the sweeper
    # treats an expired lease, or a lease held by a dead process on this host, as lost work.
    lease_owner = models.CharField(max_length=120, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # Held back while its integration is paused: the backlog an admin reviews before release.
    held = models.BooleanField(default=False)
    last_error_class = models.CharField(max_length=32, blank=True)
    last_error_message = models.TextField(blank=True)
    # The HTTP status of the last failure (503, 422...) and when the last attempt (a call or a
    # look-up) started: kept on the row so that the queue groups and sorts by them from an
    # index, never by joining every waiting operation to its attempts.
    last_error_status = models.PositiveIntegerField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    # Why a person must look: "lookup_unavailable", "duplicate_records", "retry_budget", ...
    attention = models.CharField(max_length=40, blank=True)
    external_id = models.CharField(max_length=200, blank=True)
    result = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    state_changed_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        permissions = [
            ("triage_operation", "Can reconcile, reassign, complete by hand and cancel"),
            ("recover_operation", "Can retry and compensate (changes an external system)"),
        ]
        indexes = [
            # The queue and the sweeper look only at unresolved or in-flight rows.
            models.Index(
                fields=["state", "state_changed_at"],
                name="operation_open",
                condition=models.Q(state__in=["approved", "submitted", "failed", "unknown"]),
            ),
            # The console's queue page (recovery.queue.sources): one branch per state and
            # integration, each the oldest first with a LIMIT. operation_open cannot serve it:
            # it would walk every integration's rows of a state to find one integration's.
            # enquiry is included so that the page's "enquiry has an open operation" join
            # reads this index alone (an index-only scan), not every open operation's row.
            models.Index(
                fields=["state", "integration", "state_changed_at"],
                include=["enquiry"],
                name="operation_queue",
                condition=models.Q(state__in=["unknown", "failed"]),
            ),
            # The queue's groups ("CRM 503 - retries used up - 55 items"): counted from this
            # index alone, and a group opened is read from it oldest first.
            models.Index(
                fields=[
                    "state",
                    "integration",
                    "attention",
                    "last_error_class",
                    "last_error_status",
                    "state_changed_at",
                ],
                name="operation_groups",
                condition=models.Q(state__in=["unknown", "failed"]),
            ),
            # The queue sorted by last attempt: each branch read in that order with a LIMIT.
            models.Index(
                "state",
                "integration",
                models.F("last_attempted_at").desc(nulls_last=True),
                name="operation_attempted",
                condition=models.Q(state__in=["unknown", "failed"]),
            ),
            # The queue page's paused-backlog row (recovery.queue.rows.held_count) and the
            # backlog page (ledger.services.backlog) count and list an integration's held writes;
            # without it they walk every operation the integration ever had (bench/queue_page.py).
            models.Index(
                fields=["integration", "created_at"],
                name="operation_held",
                condition=models.Q(held=True),
            ),
            # A delivery report names its message by Message-ID (ledger/delivery.py): found
            # through this index, not by reading the result of every e-mail ever sent.
            models.Index(
                KeyTransform("message_id", "result"),
                name="operation_message_id",
                condition=models.Q(action=Action.SEND_NOTICE),
            ),
        ]

    def __str__(self):
        return self.idempotency_key

    @property
    def reference(self) -> str:
        """What a person calls it: its enquiry's reference, else its payload's (a message to an
        operator: "operator casey, 14:00-14:15")."""
        if self.enquiry_id is not None:
            return self.enquiry.reference
        return str(self.payload.get("reference") or self.idempotency_key)

    @staticmethod
    def make_key(enquiry_id, action, revision) -> str:
        return f"{enquiry_id}:{action}:r{revision}"

    def ends_enquiry(self) -> bool:
        """Whether cancelling this operation closes its enquiry (ledger.services.cancel_operation):
        the CRM write of an enquiry waiting on it (approved, or its submission unknown), whose
        approved revision is then never delivered. Cancelling it any other way would leave the
        enquiry waiting on a write that will never happen: a dead end."""
        return (
            self.action == Action.CREATE_ENQUIRY
            and self.enquiry_id is not None
            and self.enquiry.state in ("approved", "submission_unknown")
        )

    def unanswered_calls(self) -> int:
        """Calls that were sent and got no answer (they may have reached the destination)."""
        return self.attempts.filter(kind="call", outcome__in=("uncertain", "")).count()

    def records_observed(self) -> list[str]:
        """The records the destination was seen to hold for this operation (a look-up that found
        more than one; a record it made without our reference; the confirmed record): what
        "did an external system change?" is answered from, and why Cancel is not offered."""
        found = [str(x) for x in (self.result or {}).get("duplicates") or [] if x]
        made = (self.result or {}).get("unconfirmed_external_id")
        if made and str(made) not in found:
            found.append(str(made))
        if self.external_id and self.external_id not in found:
            found.append(self.external_id)
        return found

    # --- transitions ------------------------------------------------------------------------
    @transition(
        state,
        source=OperationState.PROPOSED,
        target=OperationState.APPROVED,
        permission="intake.approve_revision",
        custom={"actors": (SYSTEM,)},
    )
    def approve(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=[OperationState.APPROVED, OperationState.UNKNOWN],
        target=OperationState.SUBMITTED,
        custom={"actors": (SYSTEM,)},
    )
    def submit(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=[OperationState.SUBMITTED, OperationState.UNKNOWN, OperationState.FAILED],
        target=OperationState.CONFIRMED,
        permission="ledger.triage_operation",
        custom={"actors": (SYSTEM,)},
    )
    def confirm(self, *, actor, reason="", evidence=None):
        self.attention = ""

    @transition(
        state,
        source=[OperationState.SUBMITTED, OperationState.UNKNOWN],
        target=OperationState.UNKNOWN,
        custom={"actors": (SYSTEM,)},
    )
    def mark_unknown(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=OperationState.SUBMITTED,
        target=OperationState.APPROVED,
        custom={"actors": (SYSTEM,)},
    )
    def defer(self, *, actor, reason="", evidence=None):
        """Never sent (a transient failure): back to approved until ``next_attempt_at``."""

    @transition(
        state,
        source=[OperationState.APPROVED, OperationState.SUBMITTED, OperationState.UNKNOWN],
        target=OperationState.FAILED,
        custom={"actors": (SYSTEM,)},
    )
    def fail(self, *, actor, reason="", evidence=None):
        pass

    @transition(
        state,
        source=OperationState.CONFIRMED,
        target=OperationState.FAILED,
        custom={"actors": (SYSTEM,)},
    )
    def bounce(self, *, actor, reason="", evidence=None):
        """A message the provider accepted was later reported undeliverable (a delivery
        report: ledger.delivery). Messages only: a confirmed record is never un-confirmed."""
        self.attention = "delivery_failed"

    @transition(
        state,
        source=[OperationState.FAILED, OperationState.UNKNOWN],
        target=OperationState.APPROVED,
        permission=_may_retry,
        custom={"actors": (SYSTEM,)},
    )
    def retry(self, *, actor, reason="", evidence=None):
        self.attention = ""

    @transition(
        state,
        source=[OperationState.PROPOSED, OperationState.APPROVED, OperationState.FAILED],
        target=OperationState.CANCELLED,
        permission=_may_cancel,
        custom={"actors": (SYSTEM,)},
    )
    def cancel(self, *, actor, reason="", evidence=None):
        self.attention = ""

    @transition(
        state,
        source=OperationState.CANCELLED,
        target=OperationState.PROPOSED,
        custom={"actors": (SYSTEM,)},
    )
    def repropose(self, *, actor, reason="", evidence=None):
        """A revision's write cancelled before anything was sent is proposed again when that
        revision is approved (ledger.services.approve_revision): its key was never used at the
        destination, so reusing it cannot meet an earlier request there."""
        self.attention = ""
        self.held = False
        self.next_attempt_at = None


class Attempt(models.Model):
    """One try at the destination (a call or a lookup), recorded before the call is made."""

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, default="call")  # call, lookup
    worker = models.CharField(max_length=120)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    request_summary = models.JSONField(default=dict)
    response_status = models.PositiveIntegerField(null=True, blank=True)
    response_body = models.TextField(blank=True)  # truncated
    error_class = models.CharField(max_length=32, blank=True)
    error_message = models.TextField(blank=True)
    outcome = models.CharField(max_length=32, blank=True)  # success, transient, uncertain, ...

    class Meta:
        ordering = ["operation", "number"]
        constraints = [
            models.UniqueConstraint(fields=["operation", "number"], name="attempt_number_unique")
        ]
        # A delivery report about a message whose relay never replied names a Message-ID that
        # only the attempt's request holds (ledger/delivery.py); other attempts index as NULL.
        indexes = [
            models.Index(KeyTransform("message_id", "request_summary"), name="attempt_message_id")
        ]

    def __str__(self):
        return f"{self.operation_id} #{self.number} {self.kind}: {self.outcome or 'in flight'}"


class ProviderEvent(models.Model):
    """A signed event a provider sent us, taken once (ledger.signed_events.take_once): the same
    event id again is a replay (or the provider's retry of one already acted on) and does
    nothing. Rows older than the signature window are pruned: an event that old is refused by
    its timestamp before its id is looked up."""

    provider = models.CharField(max_length=40)
    event_id = models.CharField(max_length=200)
    signed_at = models.DateTimeField()
    taken_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "event_id"], name="provider_event_taken_once"
            )
        ]
        indexes = [models.Index(fields=["signed_at"], name="provider_event_signed_at")]

    def __str__(self):
        return f"{self.provider} {self.event_id}"


class MessageTemplate(models.Model):
    """One version of the words of a message a resident receives (ledger.wording): plain text
    with named placeholders, never a template language. Versions are only added, never
    changed: the newest of a kind is the one used, and each message's payload names the
    version it was made from. Version 1 of each kind ships as data (migration
    0019_message_templates); an admin's edit is the next version, journalled with its reason."""

    kind = models.CharField(max_length=40)
    version = models.PositiveIntegerField()
    subject = models.CharField(max_length=200)
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    # None: the words Handover ships.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["kind", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "version"], name="message_template_version")
        ]

    def __str__(self):
        return f"{self.kind} v{self.version}"
