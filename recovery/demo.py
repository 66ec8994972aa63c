"""Demo work for `make run` (seed_demo): every queue and every state has something in it.

Each item is walked through its real transitions (so the journal is real), at the time it would
have happened: a clock is set back for the walk, so ages, overdue flags and the journal agree.
Nothing here is enqueued; the sweeper picks up what a running system would.
"""

from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from intake.models import Category, Enquiry, EventConflict, IntakeEvent, Revision, Suggestion
from ledger import journal
from ledger.models import Attempt, Integration, JournalEntry, Operation, payload_hash
from recovery.models import Queue, ResponsePolicy

SEED = "system:seed"
WORKER = "system:worker-demo"
MODELS = (Enquiry, Revision, Suggestion, IntakeEvent, Operation, Attempt, JournalEntry)


@contextmanager
def clock(moment):
    """Make timezone.now() (and the models' defaults that point at it) answer ``moment``."""
    real_now = timezone.now
    fields = [f for m in MODELS for f in m._meta.concrete_fields if f.default is real_now]
    timezone.now = lambda: moment
    for f in fields:
        f.default = timezone.now
        f.__dict__.pop("_get_default", None)  # Django caches the default callable per field
    try:
        yield
    finally:
        timezone.now = real_now
        for f in fields:
            f.default = real_now
            f.__dict__.pop("_get_default", None)


class Story:
    """One enquiry's history, told step by step at given ages."""

    def __init__(
        self,
        reference,
        *,
        hours_ago,
        users,
        message,
        subject="",
        email="",
        name="A Resident",
        category=None,
        source="website",
    ):
        self.t = timezone.now() - timedelta(hours=hours_ago)
        self.users = users
        with clock(self.t):
            self.enquiry = Enquiry.objects.create(
                reference=reference or Enquiry._meta.get_field("reference").default(),
                source=source,
                workflow_version="2026.11",
                name=name,
                email=email,
                subject=subject,
                message=message,
                consent=True,
            )
            fields = {
                "name": name,
                "email": email,
                "phone": "",
                "subject": subject,
                "message": message,
                "service_hint": "",
                "category": None,
            }
            Revision.objects.create(enquiry=self.enquiry, number=1, fields=fields)
            IntakeEvent.objects.create(
                source=source,
                event_id=f"evt_demo_{self.enquiry.reference}",
                body='{"demo": true}',
                body_sha256="0" * 64,
                enquiry=self.enquiry,
            )
        self.category = category

    def at(self, minutes):
        return clock(self.t + timedelta(minutes=minutes))

    def step(self, minutes, name, actor=SEED, reason="", evidence=None):
        with self.at(minutes), transaction.atomic():
            getattr(self.enquiry, name)(actor=actor, reason=reason, evidence=evidence or {})
            self.enquiry.save()
        return self

    def intake(self, minutes=0.1, *, suggestion="valid", confidence=0.82, explanation=""):
        self.step(minutes, "validate", reason="signed event accepted")
        with self.at(minutes + 0.2):
            label = self.category.slug if self.category and suggestion == "valid" else "unresolved"
            Suggestion.objects.create(
                enquiry=self.enquiry,
                revision=1,
                provider="keywords",
                model="keywords",
                prompt_version="kw-1",
                raw_output=label,
                label=label,
                category=self.category if label != "unresolved" else None,
                confidence=confidence if label != "unresolved" else 0.2,
                validation="valid" if label != "unresolved" else suggestion,
                explanation=explanation,
            )
            if label != "unresolved":
                revision = self.enquiry.revision
                revision.category = self.category
                revision.fields = {**revision.fields, "category": self.category.slug}
                revision.save()
                Enquiry.objects.filter(pk=self.enquiry.pk).update(category=self.category)
                self.enquiry.category = self.category
        actor = "model:keywords@kw-1" if label != "unresolved" else SEED
        return self.step(
            minutes + 0.3, "mark_ready_for_review", actor=actor, reason=f"suggested {label}"
        )

    def operation(
        self,
        action,
        integration,
        *,
        minutes,
        steps=(),
        attention="",
        external_id="",
        error=("", ""),
        compensates=None,
        held=False,
    ):
        revision = self.enquiry.approved_revision or self.enquiry.current_revision
        payload = {"reference": self.enquiry.reference, "revision": revision}
        key = Operation.make_key(self.enquiry.pk, action, revision)
        with self.at(minutes):
            op = Operation.objects.create(
                enquiry=self.enquiry,
                action=action,
                revision=revision,
                idempotency_key=key,
                payload=payload,
                payload_hash=payload_hash(payload),
                integration=integration,
                compensates=compensates,
            )
        for offset, name, reason, *who in steps:
            actor = who[0] if who else (SEED if name == "approve" else WORKER)
            with self.at(minutes + offset), transaction.atomic():
                getattr(op, name)(actor=actor, reason=reason)
                op.save()
        fields = {
            "attention": attention,
            "external_id": external_id,
            "held": held,
            "last_error_class": error[0],
            "last_error_message": error[1],
            "attempt_count": op.attempts.count(),
        }
        Operation.objects.filter(pk=op.pk).update(**fields)
        op.refresh_from_db()
        return op

    def attempt(
        self,
        op,
        *,
        minutes,
        kind="call",
        outcome,
        status=None,
        error_class="",
        error_message="",
        took=0.4,
        body="",
    ):
        number = op.attempts.count() + 1
        with self.at(minutes):
            Attempt.objects.create(
                operation=op,
                number=number,
                kind=kind,
                worker="worker-demo-1",
                started_at=timezone.now(),
                ended_at=timezone.now() + timedelta(seconds=took),
                request_summary={
                    "method": "POST" if kind == "call" else "GET",
                    "url": f"{op.integration.base_url if op.integration else ''}"
                    f"/{op.action.replace('.', '/')}",
                    "idempotency_key": op.idempotency_key,
                },
                response_status=status,
                response_body=body,
                error_class=error_class,
                error_message=error_message,
                outcome=outcome,
            )
        Operation.objects.filter(pk=op.pk).update(
            attempt_count=number,
            last_attempted_at=Attempt.objects.filter(operation=op)
            .order_by("-started_at")
            .values("started_at")[:1],
            **({"last_error_status": status} if error_class else {}),
        )
        return self


def seed_policies(users, integrations):
    coordinator, reviewer, admin = users["coordinator"], users["reviewer"], users["admin"]
    rows = [
        (Queue.UNKNOWN, None, coordinator, admin, timedelta(hours=2), timedelta(hours=4)),
        (Queue.FAILED, None, coordinator, admin, timedelta(hours=4), timedelta(days=1)),
        (
            Queue.FAILED,
            integrations["notify"],
            coordinator,
            admin,
            timedelta(hours=8),
            timedelta(days=1),
        ),
        (
            Queue.SUBMISSION_UNKNOWN,
            None,
            coordinator,
            admin,
            timedelta(hours=2),
            timedelta(hours=4),
        ),
        (Queue.NEEDS_INFORMATION, None, reviewer, admin, timedelta(days=2), timedelta(days=1)),
        (Queue.UNRESOLVED, None, reviewer, admin, timedelta(hours=4), timedelta(days=1)),
        (Queue.REVIEW, None, reviewer, admin, timedelta(days=1), timedelta(days=1)),
        (Queue.PAUSED, None, admin, coordinator, timedelta(hours=1), timedelta(hours=4)),
        ("", None, admin, coordinator, timedelta(days=1), timedelta(days=1)),
    ]
    for queue, integration, owner, backup, period, cadence in rows:
        ResponsePolicy.objects.update_or_create(
            queue=queue,
            integration=integration,
            defaults={
                "owner": owner,
                "backup_owner": backup,
                "response_period": period,
                "review_cadence": cadence,
            },
        )


def seed_work():
    users = {
        u.username: u
        for u in get_user_model().objects.filter(username__in=["coordinator", "reviewer", "admin"])
    }
    reviewer, coordinator = users["reviewer"], users["coordinator"]
    cats = {c.slug: c for c in Category.objects.all()}
    integrations = {i.name: i for i in Integration.objects.all()}
    crm, notify, docs = integrations["crm"], integrations["notify"], integrations["documents"]
    seed_policies(users, integrations)
    # Each integration names the person told when its credentials are refused.
    Integration.objects.filter(owner__isnull=True).update(owner=users["admin"])

    def approved(story, minutes):
        return story.step(minutes, "approve", actor=reviewer, reason="fields checked")

    # TEST-001: the CRM timed out after the request was sent; the lookup that followed failed.
    s = Story(
        "TEST-001",
        hours_ago=3.2,
        users=users,
        category=cats["website"],
        subject="Website very slow",
        email="test-001@example.org",
        name="Test Resident",
        message="The council website has been very slow all week; the bin collection "
        "page takes a minute to load and the payment form times out.",
    )
    s.intake(explanation="Mentions the website, a slow page and an online form.")
    approved(s, 12)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=12.1,
        steps=[
            (0, "approve", "revision 1 approved"),
            (0.1, "submit", "claimed by worker-demo-1"),
            (0.3, "mark_unknown", "timeout after the request was sent"),
        ],
        attention="lookup_failed",
        error=("uncertain", "ReadTimeout after 10.0 s"),
    )
    s.attempt(
        op,
        minutes=12.2,
        outcome="uncertain",
        error_class="uncertain",
        error_message="ReadTimeout: no answer within 10.0 s",
        took=10.0,
    )
    s.attempt(
        op,
        minutes=13,
        kind="lookup",
        outcome="lookup_failed",
        status=503,
        error_class="transient",
        error_message="503 Service Unavailable",
        took=0.2,
        body='{"error": "search temporarily unavailable"}',
    )
    s.step(12.4, "submit", actor=WORKER, reason="CRM write started")
    s.step(12.5, "mark_submission_unknown", actor=WORKER, reason="CRM did not answer")
    Enquiry.objects.filter(pk=s.enquiry.pk).update(owner=coordinator)

    # The destination cannot be looked up at all: the reconciliation queue.
    s = Story(
        None,
        hours_ago=1.1,
        users=users,
        category=cats["repairs"],
        subject="Leak under the kitchen sink",
        email="m.okafor@example.org",
        name="M. Okafor",
        message="Water is leaking under my kitchen sink since "
        "yesterday evening and the cupboard floor is soaked.",
    )
    s.intake(explanation="Mentions a leak: housing repairs.")
    approved(s, 8)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=8.1,
        steps=[
            (0, "approve", "revision 1 approved"),
            (0.1, "submit", "claimed"),
            (0.2, "mark_unknown", "connection lost after sending"),
        ],
        attention="lookup_unavailable",
        error=("uncertain", "Connection reset after sending"),
    )
    s.attempt(
        op,
        minutes=8.2,
        outcome="uncertain",
        error_class="uncertain",
        error_message="ConnectionResetError after the body was sent",
        took=2.1,
    )
    s.attempt(
        op,
        minutes=8.3,
        kind="lookup",
        outcome="lookup_unavailable",
        status=501,
        error_class="permanent",
        error_message="lookup is switched off",
        took=0.05,
    )
    s.step(8.25, "submit", actor=WORKER).step(8.3, "mark_submission_unknown", actor=WORKER)

    # Checked by hand and retried: the retry is queued, the enquiry is still submission_unknown.
    s = Story(
        None,
        hours_ago=6,
        users=users,
        category=cats["repairs"],
        subject="Pothole outside school",
        email="d.osei@example.org",
        name="D. Osei",
        message="There is a deep pothole outside the primary school gate on Elm Road.",
    )
    s.intake(explanation="Mentions a repair outside a school.")
    approved(s, 20)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=20.1,
        steps=[
            (0, "approve", "revision 1 approved"),
            (0.1, "submit", "claimed"),
            (0.2, "mark_unknown", "timeout after the request was sent"),
            (95, "retry", "lookup is off; searched the CRM by hand: no record", users["admin"]),
        ],
    )
    s.attempt(
        op,
        minutes=20.15,
        outcome="uncertain",
        error_class="uncertain",
        error_message="ReadTimeout after 10.0 s",
        took=10.0,
    )
    s.step(20.12, "submit", actor=WORKER).step(20.3, "mark_submission_unknown", actor=WORKER)

    # Retries used up against an unavailable CRM: failed, back to approved.
    s = Story(
        None,
        hours_ago=5.5,
        users=users,
        category=cats["waste"],
        subject="Missed bin collection",
        email="j.ellis@example.org",
        name="J. Ellis",
        message="My green recycling bin was missed again on Tuesday.",
    )
    s.intake(explanation="Mentions a bin and recycling: bins and waste.")
    approved(s, 30)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=30.1,
        steps=[
            (0, "approve", "revision 1 approved"),
            (0.1, "submit", "attempt 3 of 3"),
            (0.2, "fail", "retry budget used: 503 on every attempt"),
        ],
        attention="retry_budget_exhausted",
        error=("transient", "503 Service Unavailable"),
    )
    for i in range(3):
        s.attempt(
            op,
            minutes=30.1 + i,
            outcome="transient",
            status=503,
            error_class="transient",
            error_message="503 Service Unavailable",
            took=0.1,
        )
    s.step(30.15, "submit", actor=WORKER).step(
        30.2, "delivery_failed", actor=WORKER, reason="CRM unavailable; retries used up"
    )

    # Refused as invalid: an edit is needed, not a retry.
    s = Story(
        None,
        hours_ago=26,
        users=users,
        category=cats["repairs"],
        subject="Damp in bedroom",
        email="a.nowak@example.org",
        name="A. Nowak",
        message="There is black mould spreading on the bedroom wall by the window.",
    )
    s.intake(explanation="Mentions damp: housing repairs.")
    approved(s, 40)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=40.1,
        steps=[
            (0, "approve", "revision 1 approved"),
            (0.1, "submit", "claimed"),
            (0.2, "fail", "422 from the CRM"),
        ],
        attention="invalid",
        error=("invalid", "phone: required for housing repairs"),
    )
    s.attempt(
        op,
        minutes=40.15,
        outcome="invalid",
        status=422,
        error_class="invalid",
        error_message="phone: required for housing repairs",
        body='{"errors": {"phone": ["required for housing repairs"]}}',
    )
    s.step(40.12, "submit", actor=WORKER).step(
        40.2, "delivery_failed", actor=WORKER, reason="CRM refused the request as invalid"
    )

    # Delivered; the customer's acknowledgement failed on its own (the CRM write stands).
    s = Story(
        None,
        hours_ago=9,
        users=users,
        category=cats["waste"],
        subject="Bulky waste collection",
        email="p.singh@example.org",
        name="P. Singh",
        message="I would like to book a bulky waste collection for an old sofa.",
    )
    s.intake(explanation="Mentions waste collection.")
    approved(s, 15)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=15.1,
        steps=[
            (0, "approve", "revision 1 approved"),
            (0.1, "submit", "claimed"),
            (0.2, "mark_unknown", "timeout after the request was sent"),
            (1.2, "confirm", "reconciled: the CRM holds CRM-20431 for this reference"),
        ],
        external_id="CRM-20431",
    )
    s.attempt(
        op,
        minutes=15.15,
        outcome="uncertain",
        error_class="uncertain",
        error_message="ReadTimeout after 10.0 s",
        took=10.0,
    )
    s.attempt(
        op, minutes=16.2, kind="lookup", outcome="found", status=200, body='[{"id": "CRM-20431"}]'
    )
    s.step(15.12, "submit", actor=WORKER).step(
        15.2, "confirm", actor=WORKER, reason="CRM record CRM-20431"
    )
    op = s.operation(
        "notify.send",
        notify,
        minutes=15.3,
        steps=[
            (0, "approve", "acknowledgement"),
            (0.1, "submit", "claimed"),
            (0.2, "fail", "retry budget used"),
        ],
        attention="retry_budget_exhausted",
        error=("transient", "connection refused"),
    )
    for i in range(3):
        s.attempt(
            op,
            minutes=15.4 + i,
            outcome="transient",
            error_class="transient",
            error_message="ConnectionRefusedError: the provider is not listening",
        )

    # The CRM holds two records for one reference.
    s = Story(
        None,
        hours_ago=50,
        users=users,
        category=cats["website"],
        subject="Cannot log in to my account",
        email="r.hughes@example.org",
        name="R. Hughes",
        message="The login page says my password is wrong but the reset link never arrives.",
    )
    s.intake(explanation="Mentions login: website and online services.")
    approved(s, 5)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=5.1,
        steps=[
            (0, "approve", "revision 1 approved"),
            (0.1, "submit", "claimed"),
            (0.2, "mark_unknown", "timeout"),
            (3, "fail", "two records found for the reference"),
        ],
        attention="duplicate_records",
        error=("duplicate", "2 records for this reference"),
    )
    s.attempt(
        op,
        minutes=5.2,
        outcome="uncertain",
        error_class="uncertain",
        error_message="ReadTimeout",
        took=10.0,
    )
    s.attempt(
        op,
        minutes=8,
        kind="lookup",
        outcome="duplicate",
        status=200,
        body='[{"id": "CRM-19001"}, {"id": "CRM-19002"}]',
    )
    s.step(5.15, "submit", actor=WORKER).step(5.3, "mark_submission_unknown", actor=WORKER)

    # Needs information from the customer.
    s = Story(
        None,
        hours_ago=30,
        users=users,
        category=cats["repairs"],
        subject="Boiler",
        email="t.brown@example.org",
        name="T. Brown",
        message="Boiler broken. Please send someone.",
    )
    s.intake(explanation="Mentions a boiler: housing repairs.")
    s.step(45, "request_information", actor=reviewer, reason="no address or access times")

    # Unresolved classification, waiting for review.
    s = Story(
        None,
        hours_ago=0.8,
        users=users,
        subject="The thing on our road",
        email="c.martin@example.org",
        name="C. Martin",
        message="Can someone look at the thing on our road? It has been there for ages.",
    )
    s.intake(suggestion="unresolved: no keyword matched")

    # Ready for review with a confident suggestion; and one edited by the reviewer.
    s = Story(
        None,
        hours_ago=2,
        users=users,
        category=cats["waste"],
        subject="Recycling bin lid broken",
        email="test-001@example.org",
        name="Test Resident",
        message="The lid of my recycling bin snapped off in the wind.",
    )
    s.intake(confidence=0.91, explanation="Mentions a recycling bin: bins and waste.")
    s = Story(
        None,
        hours_ago=4,
        users=users,
        category=cats["repairs"],
        subject="heating",
        email="l.chen@example.org",
        name="L. Chen",
        message="No heating in the flat since Friday, two small children at home.",
    )
    s.intake(explanation="Mentions heating: housing repairs.")
    with s.at(20), transaction.atomic():
        rev = Revision.objects.create(
            enquiry=s.enquiry,
            number=2,
            origin="reviewer",
            created_by=reviewer,
            note="subject clarified",
            category=cats["repairs"],
            fields={**s.enquiry.revision.fields, "subject": "No heating, young children"},
        )
        s.enquiry.revise(actor=reviewer, reason="subject clarified", evidence={"revision": 2})
        s.enquiry.current_revision = rev.number
        s.enquiry.save()

    # Just received, and just checked.
    Story(
        None,
        hours_ago=0.02,
        users=users,
        subject="Street light out",
        email="k.ali@example.org",
        name="K. Ali",
        message="The street light outside number 12 Mill Lane has been out for a week.",
    )
    s = Story(
        None,
        hours_ago=0.05,
        users=users,
        subject="Parking permit renewal",
        email="s.doyle@example.org",
        name="S. Doyle",
        message="How do I renew my parking permit?",
    )
    s.step(0.1, "validate", reason="signed event accepted")

    # Approved and waiting for a worker; and one in flight.
    s = Story(
        None,
        hours_ago=0.1,
        users=users,
        category=cats["waste"],
        subject="Fly-tipping",
        email="g.evans@example.org",
        name="G. Evans",
        message="Someone has dumped rubbish bags behind the shops on Station Road.",
    )
    s.intake(explanation="Mentions rubbish: bins and waste.")
    approved(s, 3)
    s.operation("crm.create_enquiry", crm, minutes=3.1, steps=[(0, "approve", "revision 1")])
    s = Story(
        None,
        hours_ago=0.05,
        users=users,
        category=cats["website"],
        subject="Online form error",
        email="h.wood@example.org",
        name="H. Wood",
        message="The online form shows an error when I press submit.",
    )
    s.intake(explanation="Mentions an online form: website.")
    approved(s, 1)
    op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=1.1,
        steps=[(0, "approve", "revision 1"), (0.1, "submit", "claimed by worker-demo-1")],
    )
    s.attempt(op, minutes=1.15, outcome="", took=0)
    Attempt.objects.filter(operation=op).update(ended_at=None)
    s.step(1.12, "submit", actor=WORKER)

    # Delivered and acknowledged; then a compensation proposed for it.
    s = Story(
        None,
        hours_ago=72,
        users=users,
        category=cats["repairs"],
        subject="Broken window latch",
        email="n.price@example.org",
        name="N. Price",
        message="The window latch in the living room is broken and will not close.",
    )
    s.intake(explanation="Mentions broken: housing repairs.")
    approved(s, 10)
    crm_op = s.operation(
        "crm.create_enquiry",
        crm,
        minutes=10.1,
        steps=[
            (0, "approve", "revision 1"),
            (0.1, "submit", "claimed"),
            (0.2, "mark_unknown", "connection lost after sending"),
            (0.3, "fail", "lookup unavailable: a person must check"),
            (52, "confirm", "found CRM-18870 in the CRM by hand", coordinator),
        ],
        external_id="CRM-18870",
    )
    s.attempt(
        crm_op,
        minutes=10.15,
        outcome="uncertain",
        error_class="uncertain",
        error_message="ConnectionResetError",
        took=3.0,
    )
    s.step(10.12, "submit", actor=WORKER).step(10.2, "confirm", actor=WORKER)
    ack = s.operation(
        "notify.send",
        notify,
        minutes=10.3,
        steps=[
            (0, "approve", "acknowledgement"),
            (0.1, "submit", "claimed"),
            (0.2, "confirm", "202"),
        ],
        external_id="MSG-5512",
    )
    s.attempt(ack, minutes=10.35, outcome="success", status=202)
    close = s.operation("crm.close_enquiry", crm, minutes=60 * 24, compensates=crm_op)
    with s.at(60 * 24):
        journal.record(
            close,
            "recovery.operation.compensation_proposed",
            actor=users["admin"],
            reason="sent to repairs by mistake; the tenant moved out",
            evidence={"compensates": str(crm_op.pk)},
            to_state="proposed",
        )

    # Rejected, with its proposed write cancelled.
    s = Story(
        None,
        hours_ago=20,
        users=users,
        subject="Test please ignore",
        email="spam@example.org",
        name="x",
        message="asdf asdf test",
    )
    s.intake(suggestion="unresolved: no keyword matched")
    cancelled = s.operation("crm.create_enquiry", crm, minutes=30)
    with s.at(31), transaction.atomic():
        cancelled.cancel(actor=SEED, reason="enquiry rejected before approval")
        cancelled.save()
    s.step(31, "reject", actor=reviewer, reason="test submission, not a real enquiry")

    # The document store is paused, with one read held for the backlog review.
    s = Story(
        None,
        hours_ago=1.5,
        users=users,
        category=cats["repairs"],
        subject="Photos of the damage",
        email="f.khan@example.org",
        name="F. Khan",
        message="Photos attached of the ceiling damage after the leak upstairs.",
    )
    s.intake(explanation="Mentions a leak: housing repairs.")
    s.operation("documents.extract", docs, minutes=0.5, steps=[(0, "approve", "system")], held=True)
    with clock(timezone.now() - timedelta(hours=1.4)), transaction.atomic():
        Integration.objects.filter(pk=docs.pk).update(
            paused=True,
            paused_at=timezone.now(),
            paused_by=users["admin"],
            pause_reason="document store returns other tenants' files; vendor investigating",
        )
        docs.refresh_from_db()
        journal.record(
            docs,
            "ledger.integration.paused",
            actor=users["admin"],
            reason=docs.pause_reason,
            evidence={"held": 1},
        )

    # Review outcomes (classification quality) and duplicate deliveries (the dashboard).
    delivered = Suggestion.objects.filter(enquiry__approved_revision__isnull=False).exclude(
        label="unresolved"
    )
    delivered.update(review_outcome="accepted")
    Suggestion.objects.filter(enquiry__subject="Damp in bedroom").update(
        review_outcome="overridden"
    )
    Suggestion.objects.filter(enquiry__state="rejected").update(review_outcome="unresolved")
    IntakeEvent.objects.filter(enquiry__reference="TEST-001").update(deliveries=3)
    event = IntakeEvent.objects.filter(enquiry__subject="Missed bin collection").first()
    EventConflict.objects.create(event=event, body_sha256="f" * 64, body='{"changed": true}')
