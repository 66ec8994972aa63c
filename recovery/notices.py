"""Operators are told: work that needs a person reaches that person's inbox, batched.

``collect`` records what to tell whom (an OperatorNotice, once per thing):

- an item assigned to them by someone else, or handed to them by escalation (the journal's
  hand-over rows), and a write that failed or needs a person (the engine's ``fail``,
  ``needs_person`` and ``bounce`` rows) that nobody was given by hand: its queue's owner by the
  response policy, or every admin where the queue has none (recovery.ownership);
- an item they own that is overdue (the queue's own reading, recovery.queue);
- a queue they own that nobody opened within its review cadence (recovery.metrics);
- a destination that refused Handover's credentials (its integration's owner).

``send`` (recovery.digest) makes each person's message from them, reading every item again as
it is then: at most one message per person per ``OPERATOR_NOTICE_MINUTES``, through the ledger.

``run`` does both: the django-q2 schedule "recovery.notify_operators", every minute.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from ledger.models import Integration, JournalEntry, Operation
from recovery import ownership, timefmt
from recovery.digest import (  # noqa: F401 (the notices' own names, kept here)
    DIGEST_ITEMS,
    KEY_PREFIX,
    LOOKBACK,
    _key,
    enabled,
    queue_link,
    send,
    window_start,
)
from recovery.models import OperatorNotice, Queue, ResponsePolicy
from recovery.words import action_label

HANDED_OVER = ("recovery.operation.reassigned", "intake.enquiry.assigned")
ESCALATED = "recovery.escalated"
NEEDS_OWNER = ("ledger.operation.fail", "ledger.operation.needs_person", "ledger.operation.bounce")
CREDENTIALS = "ledger.integration.credentials_refused"
ESCALATION_ACTOR = "system:escalation"


def _users_by_name(names) -> dict:
    names = {n for n in names if n}
    if not names:
        return {}
    model = get_user_model()
    return {u.get_username(): u for u in model.objects.filter(username__in=names)}


def _subject_link(row, ops) -> tuple[str, str, str]:
    """(title, console path, subject) of a journal row's subject: named by its enquiry's
    reference and what it is in the console's words, never by an operation's id."""
    if row.subject_type == "ledger.operation":
        op = ops.get(row.subject_id)
        if op is None:
            return "an item no longer there", reverse("recovery:queue"), ""
        return (
            f"{op.reference}: {action_label(op.action)}",
            reverse("recovery:operation", args=[op.pk]),
            f"operation:{op.pk}",
        )
    if row.subject_type == "intake.enquiry" and row.enquiry_id is not None:
        reference = row.enquiry.reference
        return reference, reverse("recovery:enquiry", args=[reference]), f"enquiry:{reference}"
    return "an item", reverse("recovery:queue"), ""


def _stay(row, ops) -> str:
    """When the row's subject entered the state it is in (its stay), as text for a key."""
    op = ops.get(row.subject_id)
    if op is not None:
        return op.state_changed_at.isoformat()
    if row.subject_type == "intake.enquiry" and row.enquiry_id is not None:
        return row.enquiry.state_changed_at.isoformat()
    return row.at.isoformat()


def _from_journal(now) -> list[OperatorNotice]:
    actions = [*HANDED_OVER, ESCALATED, *NEEDS_OWNER, CREDENTIALS]
    rows = list(
        JournalEntry.objects.filter(at__gte=now - LOOKBACK, action__in=actions)
        .select_related("enquiry")
        .order_by("at", "id")
    )
    people = _users_by_name(
        [(r.evidence or {}).get("to") for r in rows]
        + [(r.evidence or {}).get("owner") for r in rows]
    )
    ops = {
        str(op.pk): op
        for op in Operation.objects.filter(
            pk__in=[r.subject_id for r in rows if r.subject_type == "ledger.operation"]
        ).select_related("owner", "enquiry", "integration")
    }
    notices = []
    for row in rows:
        evidence = row.evidence or {}
        users, kind, what = [], OperatorNotice.ASSIGNED, ""
        if row.action in HANDED_OVER:
            user = people.get(evidence.get("to"))
            if row.actor == ESCALATION_ACTOR or (user and row.actor == f"user:{user}"):
                continue  # escalation says so itself; taking it yourself is no news
            users = [user]
            what = f"Assigned to you by {row.actor.removeprefix('user:')}"
        elif row.action == ESCALATED:
            users = [people.get(evidence.get("to"))]
            what = "Handed to you by escalation (overdue)"
        elif row.action in NEEDS_OWNER:
            op = ops.get(row.subject_id)
            if op is None or op.enquiry_id is None:
                continue  # a message to an operator failing is in the queue, not in a message
            if op.owner_id is not None:
                continue  # given to someone by a hand-over, which told them (or they took it)
            # Nobody was given it: its queue's owner by the response policy, or, where the queue
            # has none, every admin (recovery.ownership).
            owner = ownership.item_owner(op)
            users = owner.people()
            # Its error text is the message's technical detail, read when the message is made.
            what = (
                "Its queue has no owner: it falls to the admins"
                if owner.to_admins
                else "Nobody was given it: its queue is yours"
            )
        elif row.action == CREDENTIALS:
            users = [people.get(evidence.get("owner"))]
            kind = OperatorNotice.CREDENTIALS
            what = "You own the integration"
        for user in users:
            if user is None:
                continue
            if row.action == CREDENTIALS:
                link = reverse("recovery:integrations")
                integration = Integration.objects.filter(pk=row.subject_id).first()
                title = f"The {integration or 'unnamed'} integration refused Handover's credentials"
                subject = f"integration:{integration.name}" if integration else ""
                key = f"journal:{row.pk}:{user.pk}"
            else:
                title, link, subject = _subject_link(row, ops)
                # One notice per item, person and stay in a state: a failure and a hand-over of
                # the same item to the same person are one line, not two.
                key = f"item:{row.subject_type}:{row.subject_id}:{user.pk}:{_stay(row, ops)}"
            notices.append(
                OperatorNotice(
                    user=user,
                    kind=kind,
                    key=key[:200],
                    title=(title if kind == OperatorNotice.CREDENTIALS else f"{what}: {title}")[
                        :300
                    ],
                    link=link,
                    subject=subject,
                    why=what[:300],
                    created_at=now,
                )
            )
    return notices


def _overdue(now) -> list[OperatorNotice]:
    from recovery import queue

    model = get_user_model()
    rows = [r for r in queue.all_rows(now, queue.Filters(overdue=True)) if r["q_owner"]]
    people = model.objects.in_bulk({r["q_owner"] for r in rows})
    ops = Operation.objects.select_related("enquiry").in_bulk(
        [r["q_key"] for r in rows if r["q_kind"] == queue.KIND_OPERATION]
    )
    ops = {str(pk): op for pk, op in ops.items()}
    notices = []
    for row in rows:
        user = people.get(row["q_owner"])
        if user is None:
            continue
        kind, key = row["q_kind"], row["q_key"]
        name = key  # an enquiry's reference, an integration's name
        if kind == queue.KIND_OPERATION:
            link = reverse("recovery:operation", args=[key])
            name = ops[key].reference if key in ops else "an operation"
        elif kind == queue.KIND_ENQUIRY:
            link = reverse("recovery:enquiry", args=[key])
        elif kind == queue.KIND_ANSWER:
            link = reverse("recovery:answer", args=[key])
        else:
            link = reverse("recovery:integrations")
        due = timefmt.local(row["q_due"]) if row["q_due"] else "its due time"
        why = f"Overdue since {due}"
        notices.append(
            OperatorNotice(
                user=user,
                kind=OperatorNotice.OVERDUE,
                key=f"overdue:{kind}:{key}:{row['q_since'].isoformat()}"[:200],
                title=f"{why}: {name} ({dict(Queue.choices).get(row['q_queue'])})"[:300],
                link=link,
                # A paused integration's row is its held backlog, not the integration itself.
                subject=f"{'backlog' if kind == queue.KIND_INTEGRATION else kind}:{key}"[:200],
                why=why,
                created_at=now,
            )
        )
    return notices


def _uninspected(now) -> list[OperatorNotice]:
    from recovery.metrics import stale_queues

    owners = {
        p.queue: p.owner
        for p in ResponsePolicy.objects.filter(integration__isnull=True).select_related("owner")
        if p.owner_id
    }
    notices = []
    for flag in stale_queues(now):
        owner = owners.get(flag.queue) or owners.get("")
        if not flag.stale or owner is None:
            continue
        since = flag.last_opened.isoformat() if flag.last_opened else "never"
        opened = timefmt.local(flag.last_opened) if flag.last_opened else "never"
        notices.append(
            OperatorNotice(
                user=owner,
                kind=OperatorNotice.UNINSPECTED,
                key=f"uninspected:{flag.queue}:{since}",
                title=f"Nobody opened the queue “{flag.label}” (last opened: {opened})",
                link=queue_link(flag.queue),
                subject=f"queue:{flag.queue}",
                why="You own the queue",
                created_at=now,
            )
        )
    return notices


def collect(now=None) -> int:
    """Record what to tell whom; each thing once (the notice's unique key). Returns how many
    were new."""
    now = now or timezone.now()
    found = [*_from_journal(now), *_overdue(now), *_uninspected(now)]
    if not found:
        return 0
    before = OperatorNotice.objects.count()
    OperatorNotice.objects.bulk_create(found, ignore_conflicts=True)
    return OperatorNotice.objects.count() - before


def run(now=None) -> dict:
    now = now or timezone.now()
    new = collect(now)
    sent = send(now)
    return {"new": new, "sent": len(sent)}
