"""Playing the demo stories: each enquiry walked through its real transitions at its own time.

The walk goes through the models' own transitions, so the journal is the one a running system
would write. Each step runs at the moment it happened: the models' defaults, ``auto_now``, the
transitions and the journal all read ``timezone.now()``, and the journal is append-only (a
trigger refuses UPDATE), so its times cannot be set afterwards; time-machine stops the clock at
that moment for the step. Rows the seed writes itself (attempts, a pause) get explicit times.
"""

from __future__ import annotations

from datetime import timedelta

import time_machine
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from intake.models import (
    Category,
    Document,
    Enquiry,
    EventConflict,
    IntakeEvent,
    Revision,
    Suggestion,
)
from ledger import journal, wording
from ledger.models import Action, Attempt, Integration, Operation, payload_hash
from ledger.proposals import (
    _operation_key,
    acknowledgement_payload,
    extraction_detail,
    extraction_payload,
)
from ledger.receipt import FAILURES_FOR_A_PERSON
from recovery.demo import steps as on
from recovery.demo.stories import POLICIES, STORIES
from recovery.models import ResponsePolicy

SOURCE = "website"
# The acknowledgement every story with an address got when it arrived (a few seconds later):
# sent and accepted, made at the notification destination when the demo makes its records.
ACKNOWLEDGED = on.Write(
    Action.SEND_NOTICE,
    "notify",
    0.02,
    ((0, "approve", "acknowledgement"), (0.01, "submit", "claimed"), (0.02, "confirm", "sent")),
    records=("MSG-4100",),
    external_id="MSG-4100",
    attempts=(on.Call(0.03, "success", status=202),),
)
KEYWORDS = "model:keywords@kw-1"


def at(moment):
    """Stop the clock at ``moment`` for the block (every ``timezone.now()`` answers it)."""
    return time_machine.travel(moment, tick=False)


class Player:
    """Plays one story: creates its enquiry, then each step at its minute."""

    def __init__(self, story, *, now, users, categories, integrations, make_records=None):
        self.story = story
        # (operation, how many) -> the IDs the destination gave; None: names stay as written.
        self.make_records = make_records
        self.names = {}  # a record's name in the story -> its ID at the destination
        self.t = now - timedelta(hours=story.hours_ago)
        self.users = users
        self.integrations = integrations
        self.category = categories[story.category] if story.category else None
        self.ops = {}  # action -> the story's operation, for a later step that names it

    def named(self, value):
        """``value`` with each record's story name replaced by its ID at the destination."""
        if isinstance(value, str):
            for name, real in self.names.items():
                value = value.replace(name, real)
            return value
        if isinstance(value, dict):
            return {k: self.named(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self.named(v) for v in value)
        return value

    def moment(self, minutes):
        return self.t + timedelta(minutes=minutes)

    def actor(self, name):
        return self.users.get(name, name)

    def play(self):
        self.receive()
        if self.story.email and not any(
            isinstance(step, on.Write) and step.action == Action.SEND_NOTICE
            for step in self.story.steps
        ):
            # Every enquiry with an address was acknowledged when it arrived, as the receipt
            # does: without it, "Customer acknowledged" waited for ever with no operation
            # behind it once the enquiry was cleared.
            self.write(ACKNOWLEDGED)
        handlers = {
            on.Step: self.step,
            on.Intake: self.intake,
            on.Revise: self.revise,
            on.Write: self.write,
            on.ProposeCompensation: self.propose_compensation,
            on.Pause: self.pause,
        }
        for step in self.story.steps:
            handlers[type(step)](step)
        if self.story.owner:
            # The owner took it a minute after its last event, through the service: the journal
            # says who gave it to whom, when and why, as for any assignment.
            from django.db.models import Max

            from intake.services import assign_enquiry
            from ledger.models import JournalEntry

            last = JournalEntry.objects.filter(enquiry=self.enquiry).aggregate(at=Max("at"))["at"]
            owner = self.users[self.story.owner]
            with at((last or self.t) + timedelta(minutes=1)):
                assign_enquiry(self.enquiry.pk, actor=owner, reason="taking it", owner=owner)
        if self.story.receipt_error:
            Enquiry.objects.filter(pk=self.enquiry.pk).update(
                receipt_pending=True,
                receipt_failures=FAILURES_FOR_A_PERSON,
                receipt_error=self.story.receipt_error,
            )
        return self.enquiry

    def receive(self):
        s = self.story
        fields = {
            "name": s.name,
            "email": s.email,
            "phone": "",
            "subject": s.subject,
            "message": s.message,
            "service_hint": "",
            "category": None,
        }
        reference = {"reference": s.reference} if s.reference else {}
        with at(self.t):
            self.enquiry = Enquiry.objects.create(
                **reference,
                source=SOURCE,
                workflow_version="2026.11",
                name=s.name,
                email=s.email,
                subject=s.subject,
                message=s.message,
                consent=True,
            )
            Revision.objects.create(enquiry=self.enquiry, number=1, fields=fields)
            IntakeEvent.objects.create(
                source=SOURCE,
                event_id=f"evt_demo_{self.enquiry.reference}",
                body='{"demo": true}',
                body_sha256="0" * 64,
                enquiry=self.enquiry,
                deliveries=s.deliveries,
            )

    def step(self, step):
        with at(self.moment(step.minutes)), transaction.atomic():
            getattr(self.enquiry, step.name)(
                actor=self.actor(step.actor),
                reason=self.named(step.reason),
                evidence=self.named(step.evidence or {}),
            )
            self.enquiry.save()

    def intake(self, step):
        minutes = step.minutes
        self.step(on.Step(minutes, "validate", reason="signed event accepted"))
        resolved = self.category is not None and step.suggestion == "valid"
        label = self.category.slug if resolved else "unresolved"
        with at(self.moment(minutes + 0.2)):
            Suggestion.objects.create(
                enquiry=self.enquiry,
                revision=1,
                provider="keywords",
                model="keywords",
                prompt_version="kw-1",
                raw_output=label,
                label=label,
                category=self.category if resolved else None,
                confidence=step.confidence if resolved else 0.2,
                validation="valid" if resolved else step.suggestion,
                explanation=step.explanation,
            )
            if resolved:
                revision = self.enquiry.revision
                revision.category = self.category
                revision.fields = {**revision.fields, "category": self.category.slug}
                revision.save()
                Enquiry.objects.filter(pk=self.enquiry.pk).update(category=self.category)
                self.enquiry.category = self.category
        self.step(
            on.Step(
                minutes + 0.3,
                "mark_ready_for_review",
                actor=KEYWORDS if resolved else on.SEED,
                reason=f"suggested {label}",
            )
        )

    def revise(self, step):
        actor = self.actor(step.actor)
        enquiry = self.enquiry
        with at(self.moment(step.minutes)), transaction.atomic():
            revision = Revision.objects.create(
                enquiry=enquiry,
                number=enquiry.current_revision + 1,
                origin="reviewer",
                created_by=actor,
                note=step.note,
                category=self.category,
                fields={**enquiry.revision.fields, **step.fields},
            )
            enquiry.revise(actor=actor, reason=step.note, evidence={"revision": revision.number})
            enquiry.current_revision = revision.number
            enquiry.save()

    def write(self, step):
        enquiry = self.enquiry
        action = step.action
        revision = enquiry.approved_revision or enquiry.current_revision
        payload = {"reference": enquiry.reference, "revision": revision}
        key = Operation.make_key(enquiry.pk, action, revision)
        if action == Action.SEND_NOTICE:
            # The acknowledgement as the receipt proposes it (its payload and its key): what a
            # retry sends, and what the demo's confirmed one was made with at the destination.
            revision = 1
            payload = acknowledgement_payload(enquiry)
            key = f"{enquiry.pk}:{action}:{wording.RECEIVED}:r1"
        if action == Action.EXTRACT_DOCUMENT:
            # A read names the document and version it reads, as ledger.proposals makes it:
            # the connector reads the payload's document_id (a reference alone is not a read).
            document, _ = Document.objects.get_or_create(
                enquiry=enquiry, document_id=f"{enquiry.reference}-photos", version="1"
            )
            payload = extraction_payload(document)
            key = _operation_key(enquiry, action, revision, extraction_detail(document))
        with at(self.moment(step.minutes)):
            op = Operation.objects.create(
                enquiry=enquiry,
                action=action,
                revision=revision,
                idempotency_key=key,
                payload=payload,
                payload_hash=payload_hash(payload),
                integration=self.integrations[step.integration],
                compensates=self.ops[step.compensates] if step.compensates else None,
            )
        if step.records and self.make_records is not None:
            made = self.make_records(op, len(step.records))
            self.names.update(zip(step.records, made, strict=True))
        for offset, name, reason, *who in step.transitions:
            actor = self.actor(who[0]) if who else (on.SEED if name == "approve" else on.WORKER)
            with at(self.moment(step.minutes + offset)), transaction.atomic():
                getattr(op, name)(actor=actor, reason=self.named(reason))
                op.save()
        Operation.objects.filter(pk=op.pk).update(
            attention=step.attention,
            external_id=self.named(step.external_id),
            held=step.held,
            last_error_class=step.error[0],
            last_error_message=step.error[1],
            attempt_count=op.attempts.count(),
            result=self.named(step.result or {}),
        )
        if step.lease:
            worker, minutes = step.lease
            seeded = self.t + timedelta(hours=self.story.hours_ago)
            Operation.objects.filter(pk=op.pk).update(
                lease_owner=worker, lease_expires_at=seeded + timedelta(minutes=minutes)
            )
        op.refresh_from_db()
        self.ops[action] = op
        for call in step.attempts:
            self.call(op, call)
        found = self.named((step.result or {}).get("duplicates"))
        if found:
            # As the engine journals a look-up that found more than one (the dashboard counts it).
            lookup = op.attempts.filter(kind="lookup").order_by("-number").first()
            with at(lookup.started_at if lookup else self.moment(step.minutes)):
                journal.record(
                    op,
                    "ledger.operation.duplicate_detected",
                    actor=on.WORKER,
                    reason=f"{len(found)} records for {self.enquiry.reference}",
                    evidence={"found": found},
                )
        return op

    def call(self, op, call):
        number = op.attempts.count() + 1
        started = self.moment(call.minutes)
        integration = op.integration
        Attempt.objects.create(
            operation=op,
            number=number,
            kind=call.kind,
            worker="worker-demo-1",
            started_at=started,
            ended_at=None if call.took is None else started + timedelta(seconds=call.took),
            request_summary={
                "method": "POST" if call.kind == "call" else "GET",
                "url": f"{integration.base_url if integration else ''}"
                f"/{op.action.replace('.', '/')}",
                "idempotency_key": op.idempotency_key,
            },
            response_status=call.status,
            response_body=self.named(call.body),
            error_class=call.error_class,
            error_message=call.error_message,
            outcome=call.outcome,
        )
        Operation.objects.filter(pk=op.pk).update(
            attempt_count=number,
            last_attempted_at=Attempt.objects.filter(operation=op)
            .order_by("-started_at")
            .values("started_at")[:1],
            **({"last_error_status": call.status} if call.error_class else {}),
        )

    def propose_compensation(self, step):
        earlier = self.ops[step.compensates]
        undo = on.Write(
            step.action, earlier.integration.name, step.minutes, compensates=step.compensates
        )
        close = self.write(undo)
        with at(self.moment(step.minutes)):
            journal.record(
                close,
                "recovery.operation.compensation_proposed",
                actor=self.actor(step.actor),
                reason=step.reason,
                evidence={"compensates": str(earlier.pk)},
                to_state="proposed",
            )

    def pause(self, step):
        integration = self.integrations[step.integration]
        actor = self.actor(step.actor)
        moment = self.moment(step.minutes)
        with at(moment), transaction.atomic():
            Integration.objects.filter(pk=integration.pk).update(
                paused=True, paused_at=moment, paused_by=actor, pause_reason=step.reason
            )
            integration.refresh_from_db()
            held = Operation.objects.filter(integration=integration, held=True).count()
            journal.record(
                integration,
                "ledger.integration.paused",
                actor=actor,
                reason=step.reason,
                evidence={"held": held},
            )


def seed_policies(users, integrations):
    for queue, integration, owner, backup, period, cadence in POLICIES:
        ResponsePolicy.objects.update_or_create(
            queue=queue,
            integration=integrations[integration] if integration else None,
            defaults={
                "owner": users[owner],
                "backup_owner": users[backup],
                "response_period": period,
                "review_cadence": cadence,
            },
        )


def finish(played):
    """What the console shows about the whole set: review outcomes, repeated deliveries."""
    delivered = Suggestion.objects.filter(enquiry__approved_revision__isnull=False)
    delivered.exclude(label="unresolved").update(review_outcome="accepted")
    for story, enquiry in played:
        if story.review_outcome:
            Suggestion.objects.filter(enquiry=enquiry).update(review_outcome=story.review_outcome)
    for story, enquiry in played:
        if story.conflicting_delivery:
            EventConflict.objects.create(
                event=enquiry.event, body_sha256="f" * 64, body='{"changed": true}'
            )


def seed_waiting_reply(now):
    """A resident's e-mail that answers no message of ours (no Message-ID, no signed reply
    address): the queue's "Resident reply waiting" row, which a reviewer attaches or sets
    aside."""
    from intake import answers

    with at(now - timedelta(hours=3)):
        answers.receive_answer(
            None,
            channel="email",
            text="Hello, I wrote last week about the bins on Mill Lane and have heard nothing "
            "back. Could someone tell me what is happening?\n\nAna Lopes",
            sender="ana.lopes@example.org",
            subject="bins on Mill Lane",
        )


def seed_work(now=None, *, make_records=None):
    """Play every story, each dated back from ``now`` (default: the real time).

    ``make_records``: makes the records the stories name at the destination (demo.records
    .at_destination, what `make run` passes); None leaves the stories' own names, which no
    destination holds (test databases)."""
    now = now or timezone.now()
    usernames = ["coordinator", "reviewer", "admin"]
    users = {u.username: u for u in get_user_model().objects.filter(username__in=usernames)}
    categories = {c.slug: c for c in Category.objects.all()}
    integrations = {i.name: i for i in Integration.objects.all()}
    seed_policies(users, integrations)
    # Each integration names the person told when its credentials are refused.
    Integration.objects.filter(owner__isnull=True).update(owner=users["admin"])
    played = []
    for story in STORIES:
        player = Player(
            story,
            now=now,
            users=users,
            categories=categories,
            integrations=integrations,
            make_records=make_records,
        )
        played.append((story, player.play()))
    finish(played)
    seed_waiting_reply(now)
    # What was overdue before the console opens is escalated now, in the journal, as the
    # schedule would have done by then: the morning starts as the stories say, and the first
    # run of the schedule after `make run` starts finds nothing to move.
    from recovery.tasks import escalate_overdue

    escalate_overdue(now)
