"""Intake's services: receiving signed events and the reviewer's actions on an enquiry.

Every state change here locks the enquiry, transitions and saves in one transaction (the journal
row is written by the transition's signal in that same transaction). Intake never imports the
ledger: it tells it what happened through intake.signals, sent inside the transaction.

A reviewer's action here (``_transition``) and a person's action on an operation
(ledger.services.common.operator_action) share what can be shared from below both, in
intake.workflow: the reason rule (``require_reason``), the refusal (``ActionRefused``) and the
journal (the transition's django-fsm signal, written by ledger.journal). They do not share one
skeleton, by design: intake sits below the ledger and never imports it, an enquiry's permission
is declared on its transition and enforced for every caller by the pre_transition guard
(intake.workflow.guard_transition_actor), while an operation's depends on its policy and its row
(ledger.policies.permission_for, checked under the lock of the enquiry and then the operation).
The person in the console meets one skeleton either way: recovery.views.actions.act checks their
permission, the reason and the state in the same words before either service is called.
tests/intake/test_services.py pins the shared parts.
"""

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from django_fsm import TransitionNotAllowed, can_proceed

from config import roundtrip
from intake import signals, signing
from intake.classification import suggest_category  # noqa: F401  (part of this service API)
from intake.models import Category, Document, Enquiry, EventConflict, IntakeEvent, Revision
from intake.payload import (
    MAX_DEPTH,
    NestedTooDeeply,
    NotJson,
    canonical,
    parse_json,
    validate_payload,
)
from intake.revisions import add_revision
from intake.visible import has_visible_text
from intake.workflow import RESIDENT_MESSAGE_REQUIRED, SYSTEM, ActionRefused, require_reason

INTAKE_ACTOR = "system:intake"
EDITABLE_FIELDS = ("name", "email", "phone", "subject", "message", "service_hint")


@dataclass(frozen=True)
class IntakeResult:
    status: int
    body_dict: dict

    @property
    def body(self) -> dict:
        return self.body_dict


def _error(status: int, message: str) -> IntakeResult:
    return IntakeResult(status, {"error": message})


# --- receiving events -------------------------------------------------------------------------


def receive_event(source: str, headers, body: bytes, *, now: datetime | None = None):
    """Verify, deduplicate, validate and store one delivery; answer as the endpoint will.

    202 new enquiry; 200 a repeated delivery (the stored answer); 409 the same event ID with a
    different body; 422 field errors (nothing stored); 401 not authentic; 413 too large; 415 not
    JSON. Nothing a sender can put in ``headers`` or ``body`` raises out of here.
    """
    now = now or timezone.now()
    secrets = _secrets_for(source)
    if secrets is None:
        return _error(401, "Unknown source.")
    if len(body) > settings.INTAKE_MAX_BODY_BYTES:
        return _error(413, f"The body is larger than {settings.INTAKE_MAX_BODY_BYTES} bytes.")
    # The contract is JSON only: any other declared type (a form, multipart with or without a
    # boundary) is refused as such before anything else is read from it.
    content_type = str(_header(headers, "content-type") or "").split(";")[0].strip().lower()
    if content_type and content_type != "application/json" and not content_type.endswith("+json"):
        return _error(415, "Send the body as application/json.")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return _error(415, "The body must be UTF-8 JSON.")
    event_id = _header(headers, "webhook-id")
    if event_id is not None and not _readable_event_id(str(event_id)):
        # It could never verify: a header arrives as latin-1, the sender signed other bytes.
        return _error(401, EVENT_ID_REFUSED)
    try:
        signing.verify(
            secrets,
            headers,
            body,
            now=now,
            tolerance_seconds=settings.INTAKE_TIMESTAMP_TOLERANCE_SECONDS,
        )
    except signing.SignatureRefused as exc:
        return _error(401, f"Signature refused: {exc}.")
    try:
        data = parse_json(text)
    except NestedTooDeeply:
        return IntakeResult(
            422,
            {
                "errors": {
                    "body": [
                        f"The JSON is nested too deeply: at most {MAX_DEPTH} levels of arrays "
                        "and objects (this contract needs three)."
                    ]
                }
            },
        )
    except NotJson:
        return _error(415, "The body is not valid JSON.")

    event_id = str(event_id)
    digest = hashlib.sha256(body).hexdigest()

    payload, errors = validate_payload(data)
    if errors:
        # A repeat outranks validation: a sender re-delivering a stored event gets its answer.
        if _event_exists(source, event_id):
            return _repeat(source, event_id, digest, text, data)
        return IntakeResult(422, {"errors": errors})

    with transaction.atomic():
        stored = _store(source, event_id, text, digest, payload, now)
    if stored is None:
        # Stored before (or by a twin that committed while we waited on the unique index).
        return _repeat(source, event_id, digest, text, data)
    return stored


EVENT_ID_MAX = IntakeEvent._meta.get_field("event_id").max_length
# Also the web server's words for a webhook-id it cannot parse (config/badheaders.py).
EVENT_ID_REFUSED = (
    f"Signature refused: webhook-id must be printable ASCII of at most {EVENT_ID_MAX} "
    "characters (letters, digits and punctuation, as Standard Webhooks ids are)."
)


def _readable_event_id(event_id: str) -> bool:
    return 0 < len(event_id) <= EVENT_ID_MAX and event_id.isascii() and event_id.isprintable()


def _event_exists(source, event_id) -> bool:
    return IntakeEvent.objects.filter(source=source, event_id=event_id).exists()


# The event row goes in first, and only if its identity is new: ON CONFLICT DO NOTHING makes a
# repeat cost no error (nor an error line in PostgreSQL's log), and a twin still in flight makes
# this statement wait for the twin's commit, then insert nothing. Its enquiry is inserted next
# in the same transaction (the foreign key is checked at commit).
_INSERT_EVENT_SQL = (
    "INSERT INTO intake_intakeevent (source, event_id, received_at, last_delivery_at, body, "
    "body_sha256, enquiry_id, deliveries) VALUES (%s, %s, %s, %s, %s, %s, %s, 1) "
    "ON CONFLICT (source, event_id) DO NOTHING RETURNING id"
)


def _insert_event(source, event_id, text, digest, enquiry, now) -> IntakeEvent | None:
    """The new event row, or None when (source, event_id) is already stored."""
    with roundtrip.prepared_cursor() as cursor:
        cursor.execute(_INSERT_EVENT_SQL, [source, event_id, now, now, text, digest, enquiry.pk])
        row = cursor.fetchone()
    if row is None:
        return None
    event = IntakeEvent(
        id=row[0],
        source=source,
        event_id=event_id,
        received_at=now,
        last_delivery_at=now,
        body=text,
        body_sha256=digest,
        enquiry=enquiry,
    )
    event._state.adding = False
    return event


def _header(headers, name):
    for key, value in headers.items():
        if str(key).lower() == name:
            return value
    return None


def _secrets_for(source: str):
    configured = settings.INTAKE_SECRETS
    if not isinstance(configured, dict):
        return None
    secrets = configured.get(source)
    if isinstance(secrets, str):
        secrets = [secrets]
    if not isinstance(secrets, list) or not secrets:
        return None
    return [s for s in secrets if isinstance(s, str)]


def _accepted_body(enquiry: Enquiry, *, duplicate: bool) -> dict:
    return {"reference": enquiry.reference, "status": "received", "duplicate": duplicate}


def _store(source, event_id, text, digest, payload, now) -> IntakeResult | None:
    """Store a new event and its enquiry; None (and nothing written) if the event is stored."""
    enquiry = Enquiry(
        source=source,
        workflow_version=settings.WORKFLOW_VERSION,
        name=payload.name,
        email=payload.email,
        phone=payload.phone,
        subject=payload.subject,
        message=payload.message,
        service_hint=payload.service,
        consent=payload.consent,
        documents=payload.documents,
        created_at=now,
        state_changed_at=now,
        receipt_pending=True,
    )
    event = _insert_event(source, event_id, text, digest, enquiry, now)
    if event is None:
        return None
    # Everything below goes to PostgreSQL in one round trip after the event's INSERT (whose
    # answer decided that there is anything to write): the enquiry, its first revision, its
    # documents, the transition's journal row and the receipt's task, which the ledger's
    # receivers queue in this transaction (config.roundtrip).
    with roundtrip.together():
        # Received and validated in this one transaction: the transition runs before the first
        # save, so the row is inserted once, already validated (its journal row says
        # received -> validated), instead of inserted and then updated.
        enquiry.validate(
            actor=INTAKE_ACTOR,
            reason="signed event accepted",
            evidence={"event": f"{source}/{event_id}", "body_sha256": digest},
        )
        revision = Revision(
            enquiry=enquiry,
            number=1,
            fields=payload.revision_fields(),
            origin="intake",
            created_at=now,
        )
        roundtrip.insert([enquiry])
        roundtrip.insert([revision])
        roundtrip.insert(
            Document(enquiry=enquiry, document_id=d["id"], version=d["version"])
            for d in payload.documents
        )
        signals.enquiry_received.send(sender=Enquiry, enquiry=enquiry, event=event)
    return IntakeResult(202, _accepted_body(enquiry, duplicate=False))


def same_event(stored_text: str, data) -> bool:
    """Whether a body that is not byte for byte the stored one is still the same event: the
    same JSON value with key order, whitespace, escapes and Unicode normalisation (NFC
    against NFD) not counting (docs/intake.md, "The same event")."""
    try:
        stored = canonical(parse_json(stored_text))
    except ValueError:
        return False
    return stored is not None and stored == canonical(data)


def _repeat(source, event_id, digest, text, data) -> IntakeResult:
    with transaction.atomic():
        event = (
            IntakeEvent.objects.select_for_update(of=("self",))
            .select_related("enquiry")
            .get(source=source, event_id=event_id)
        )
        if event.body_sha256 != digest and not same_event(event.body, data):
            conflict = EventConflict.objects.create(event=event, body_sha256=digest, body=text)
            signals.enquiry_action.send(
                sender=Enquiry,
                enquiry=event.enquiry,
                action="intake.event.conflict",
                actor=INTAKE_ACTOR,
                reason="same event ID delivered with a different body; refused",
                evidence={
                    "event": str(event),
                    "stored_sha256": event.body_sha256,
                    "refused_sha256": digest,
                    "conflict": conflict.pk,
                },
            )
            return IntakeResult(
                409,
                {
                    "error": "This webhook-id was already used with a different body; "
                    "send a new webhook-id for a new enquiry.",
                    "reference": event.enquiry.reference,
                },
            )
        event.deliveries += 1
        event.last_delivery_at = timezone.now()
        event.save(update_fields=["deliveries", "last_delivery_at"])
        signals.event_redelivered.send(sender=Enquiry, enquiry=event.enquiry, event=event)
        return IntakeResult(200, _accepted_body(event.enquiry, duplicate=True))


# --- reviewer and coordinator actions ---------------------------------------------------------


def _locked(enquiry_id) -> Enquiry:
    return Enquiry.objects.select_for_update().get(pk=enquiry_id)


# PostgreSQL stores no NUL and UTF-8 carries no lone surrogate: each becomes U+FFFD.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
RESIDENT_MESSAGE_MAX = 4000


def storable_text(value) -> str:
    return _UNSTORABLE.sub("\ufffd", str(value or ""))


def _transition(
    enquiry_id, name, *, actor, reason, evidence=None, resident_message=None
) -> Enquiry:
    """``resident_message``: for a transition the resident is told about, the words written
    for them (kept in the journal's evidence as ``resident_message``, apart from the reason,
    and put in their message by the ledger). Required when the enquiry has an address a
    message can go to; None for a transition that tells the resident nothing."""
    require_reason(reason, actor=actor)
    evidence = dict(evidence or {})
    with transaction.atomic():
        enquiry = _locked(enquiry_id)
        refused = ActionRefused(
            f"{enquiry.reference} is {enquiry.get_state_display()}: "
            f"cannot {name.replace('_', ' ')}."
        )
        if resident_message is not None:
            if not can_proceed(getattr(enquiry, name)):
                raise refused  # the state first: no message is asked for what cannot be done
            message = storable_text(resident_message).strip()[:RESIDENT_MESSAGE_MAX]
            if enquiry.email and not has_visible_text(message):
                raise ActionRefused(RESIDENT_MESSAGE_REQUIRED)
            if message:
                evidence["resident_message"] = message
        try:
            getattr(enquiry, name)(actor=actor, reason=reason, evidence=evidence)
        except TransitionNotAllowed:
            raise refused from None
        enquiry.save()
    return enquiry


def request_information(enquiry_id, *, actor, reason, resident_message="") -> Enquiry:
    """Ask the resident for more: ``resident_message`` is what they read, ``reason`` stays in
    the journal."""
    return _transition(
        enquiry_id,
        "request_information",
        actor=actor,
        reason=reason,
        resident_message=resident_message,
    )


def information_received(enquiry_id, *, actor, reason) -> Enquiry:
    return _transition(enquiry_id, "information_received", actor=actor, reason=reason)


def reject_enquiry(enquiry_id, *, actor, reason, resident_message="") -> Enquiry:
    """Close without delivering it: ``resident_message`` is what the resident reads (the
    reason, which stays in the journal, never reaches them)."""
    return _transition(
        enquiry_id, "reject", actor=actor, reason=reason, resident_message=resident_message
    )


def _category(value) -> Category | None:
    if value is None or isinstance(value, Category):
        category = value
    else:
        category = Category.objects.filter(slug=str(value)).first()
        if category is None:
            raise ActionRefused(f"There is no category {value!r}.")
    if category is not None and not category.active:
        raise ActionRefused(f"{category.name} is retired: choose an active category.")
    return category


def revise_enquiry(enquiry_id, *, actor, reason, fields: dict, category=None) -> Revision:
    """Make revision N+1 from the current one; any approval of revision N does not carry over.

    ``fields`` holds only what changes (keys from EDITABLE_FIELDS); ``category`` is a Category
    or slug, None to keep the current one. The enquiry's original message is never touched.
    """
    require_reason(reason, actor=actor)
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        raise ActionRefused(f"These fields cannot be edited: {', '.join(unknown)}.")
    chosen = _category(category)
    with transaction.atomic():
        enquiry = _locked(enquiry_id)
        previous = enquiry.revision
        new_fields = {
            **previous.fields,
            **{k: "" if v is None else str(v).strip() for k, v in fields.items()},
        }
        new_category = chosen or previous.category
        new_fields["category"] = new_category.slug if new_category else None
        try:
            enquiry.revise(
                actor=actor,
                reason=reason,
                evidence={
                    "revision": previous.number + 1,
                    "changed": sorted(
                        k for k in new_fields if new_fields[k] != previous.fields.get(k)
                    ),
                },
            )
        except TransitionNotAllowed:
            raise ActionRefused(
                f"{enquiry.reference} is {enquiry.get_state_display()}: it can no longer be edited."
            ) from None
        revision = add_revision(
            enquiry,
            previous,
            fields=new_fields,
            category=new_category,
            origin="reviewer" if isinstance(actor, AbstractBaseUser) else str(actor)[:32],
            note=reason or "",
            actor=actor,
            reason=reason,
            created_by=actor if isinstance(actor, AbstractBaseUser) else None,
        )
    return revision


def assign_enquiry(enquiry_id, *, actor, reason, owner, given=None) -> Enquiry:
    """Name the person who owns an enquiry; not a change of state, so journalled by signal.
    ``given``: who owned it without being named (its queue's owner, as the console read it),
    the hand-over's "from" when nobody was named."""
    require_reason(reason, actor=actor)
    if isinstance(actor, AbstractBaseUser):
        if not actor.is_active or not (
            actor.has_perm("intake.review_enquiry") or actor.has_perm("intake.complete_enquiry")
        ):
            raise PermissionDenied(f"{actor.get_username()} may not assign enquiries")
    elif str(actor).split(":", 1)[0] != SYSTEM:
        raise PermissionDenied(f"{actor} may not assign enquiries")
    if owner is not None and not owner.is_active:
        raise ActionRefused(f"{owner.get_username()} is not an active user.")
    with transaction.atomic():
        enquiry = _locked(enquiry_id)
        previous = enquiry.owner or given
        enquiry.owner = owner
        enquiry.save(update_fields=["owner", "updated_at"])
        signals.enquiry_action.send(
            sender=Enquiry,
            enquiry=enquiry,
            action="intake.enquiry.assigned",
            actor=actor,
            reason=reason,
            evidence={
                "from": previous.get_username() if previous else None,
                "to": owner.get_username() if owner else None,
            },
        )
    return enquiry


def customer_matches(enquiry: Enquiry):
    """Earlier enquiries with the same email, newest first: shown to the reviewer, never dedup."""
    if not enquiry.email:
        return Enquiry.objects.none()
    return (
        Enquiry.objects.filter(email=enquiry.email.lower(), created_at__lte=enquiry.created_at)
        .exclude(pk=enquiry.pk)
        .order_by("-created_at")
    )
