"""Operators are told: work that needs a person reaches that person's inbox, batched.

``collect`` records what to tell whom (an OperatorNotice, once per thing):

- an item assigned to them by someone else, or handed to them by escalation (the journal's
  hand-over rows), and a write that failed or needs a person (the engine's ``fail``,
  ``needs_person`` and ``bounce`` rows) that nobody was given by hand: its queue's owner by the
  response policy, or every admin where the queue has none (recovery.ownership);
- an item they own that is overdue (the queue's own reading, recovery.queue);
- a queue they own that nobody opened within its review cadence (recovery.metrics);
- a destination that refused Handover's credentials (its integration's owner).

``send`` gathers each person's notices into one message, at most one per person per
``OPERATOR_NOTICE_MINUTES``: a notify.send operation with no enquiry, whose idempotency key is
made of the person and the window (``operator:<user id>:notify.send:operator_digest:<window>``),
so it goes through the ledger like any message: a failure is visible in the queue, and nothing
is sent twice. People who turned their messages off (/console/me/) are skipped.

``run`` does both: the django-q2 schedule "recovery.notify_operators", every minute.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from ledger.models import Integration, JournalEntry, Operation
from ledger.notices import OPERATOR_DIGEST
from ledger.proposals import notice_payload
from ledger.services import propose_message
from recovery import ownership, timefmt
from recovery.models import NoticePreference, OperatorNotice, Queue, ResponsePolicy

LOOKBACK = timedelta(days=1)  # older events are not news any more
KEY_PREFIX = "operator"
HANDED_OVER = ("recovery.operation.reassigned", "intake.enquiry.assigned")
ESCALATED = "recovery.escalated"
NEEDS_OWNER = ("ledger.operation.fail", "ledger.operation.needs_person", "ledger.operation.bounce")
CREDENTIALS = "ledger.integration.credentials_refused"
ESCALATION_ACTOR = "system:escalation"
DIGEST_ITEMS = 50  # the message lists the first 50 and counts the rest


def _users_by_name(names) -> dict:
    names = {n for n in names if n}
    if not names:
        return {}
    model = get_user_model()
    return {u.get_username(): u for u in model.objects.filter(username__in=names)}


def _subject_link(row) -> tuple[str, str]:
    """(title, console path) of a journal row's subject."""
    if row.subject_type == "ledger.operation":
        op = Operation.objects.filter(pk=row.subject_id).select_related("enquiry").first()
        if op is None:
            return row.subject_id, reverse("recovery:queue")
        return (
            f"{op.reference}: {op.action} ({op.get_state_display()})",
            reverse("recovery:operation", args=[op.pk]),
        )
    if row.subject_type == "intake.enquiry" and row.enquiry_id is not None:
        reference = row.enquiry.reference
        return reference, reverse("recovery:enquiry", args=[reference])
    return row.subject_id, reverse("recovery:queue")


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
            users = ownership.item_owner(op).people()
            what = "Needs you: " + (row.reason or row.action)[:120]
        elif row.action == CREDENTIALS:
            users = [people.get(evidence.get("owner"))]
            kind = OperatorNotice.CREDENTIALS
            what = "Refused Handover's credentials"
        for user in users:
            if user is None:
                continue
            if row.action == CREDENTIALS:
                title, link = str(row.subject_id), reverse("recovery:integrations")
                integration = Integration.objects.filter(pk=row.subject_id).first()
                title = f"The {integration} integration" if integration else title
                key = f"journal:{row.pk}:{user.pk}"
            else:
                title, link = _subject_link(row)
                # One notice per item, person and stay in a state: a failure and a hand-over of
                # the same item to the same person are one line, not two.
                key = f"item:{row.subject_type}:{row.subject_id}:{user.pk}:{_stay(row, ops)}"
            notices.append(
                OperatorNotice(
                    user=user,
                    kind=kind,
                    key=key[:200],
                    title=f"{what}: {title}"[:300],
                    link=link,
                    created_at=now,
                )
            )
    return notices


def _overdue(now) -> list[OperatorNotice]:
    from recovery import queue

    model = get_user_model()
    rows = [r for r in queue.all_rows(now, queue.Filters(overdue=True)) if r["q_owner"]]
    people = model.objects.in_bulk({r["q_owner"] for r in rows})
    notices = []
    for row in rows:
        user = people.get(row["q_owner"])
        if user is None:
            continue
        kind, key = row["q_kind"], row["q_key"]
        if kind == queue.KIND_OPERATION:
            link = reverse("recovery:operation", args=[key])
        elif kind == queue.KIND_ENQUIRY:
            link = reverse("recovery:enquiry", args=[key])
        elif kind == queue.KIND_ANSWER:
            link = reverse("recovery:answer", args=[key])
        else:
            link = reverse("recovery:integrations")
        due = timefmt.local(row["q_due"]) if row["q_due"] else "its due time"
        notices.append(
            OperatorNotice(
                user=user,
                kind=OperatorNotice.OVERDUE,
                key=f"overdue:{kind}:{key}:{row['q_since'].isoformat()}"[:200],
                title=f"Overdue since {due}: {key} ({dict(Queue.choices).get(row['q_queue'])})",
                link=link,
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
                title=f"Nobody opened the queue '{flag.label}' (last opened: {opened})",
                link=reverse("recovery:queue") + f"?queue={flag.queue}",
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


def enabled(user) -> bool:
    preference = NoticePreference.objects.filter(user=user).first()
    return preference is None or preference.enabled


def window_start(now, minutes: int):
    """The start of the interval ``now`` falls in (intervals counted from the epoch, UTC)."""
    seconds = minutes * 60
    epoch = int(now.timestamp())
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def _key(user, window) -> str:
    return f"{KEY_PREFIX}:{user.pk}:notify.send:{OPERATOR_DIGEST}:{window:%Y%m%dT%H%MZ}"


def send(now=None) -> list[Operation]:
    """One message per person with something new, at most one per interval: the batch, as a
    notify.send operation (no enquiry) approved and enqueued with its notices marked."""
    now = now or timezone.now()
    minutes = settings.OPERATOR_NOTICE_MINUTES
    pending = OperatorNotice.objects.filter(
        operation__isnull=True, created_at__gte=now - LOOKBACK
    ).values("user_id")
    model = get_user_model()
    sent = []
    for user in model.objects.filter(pk__in=pending, is_active=True).order_by("pk"):
        if not user.email or not enabled(user):
            continue
        last = (
            Operation.objects.filter(
                enquiry__isnull=True, idempotency_key__startswith=f"{KEY_PREFIX}:{user.pk}:"
            )
            .order_by("-created_at")
            .values_list("created_at", flat=True)
            .first()
        )
        if last is not None and last > now - timedelta(minutes=minutes):
            continue  # at most one per interval: the next window carries these
        op = _send_one(user, now, minutes)
        if op is not None:
            sent.append(op)
    return sent


class _NotNow(Exception):
    """The digest is not sent this time; its transaction is rolled back and the notices wait."""


def _send_one(user, now, minutes):
    """The person's pending notices as one message, in one transaction, set-based: count them and
    read the first ``DIGEST_ITEMS`` for the payload, propose the message, then mark them with one
    ``UPDATE`` by the person and the window's lower bound (no list of ids, no row objects).

    The mark must carry exactly what the message counts: if it does not (a notice came or went
    between the read and the mark), or the window's message exists already (made by a concurrent
    sender, or earlier in this window), nothing is sent now: the transaction rolls back and the
    notices wait for the next run. A crash rolls everything back the same way."""
    window = window_start(now, minutes)
    pending = OperatorNotice.objects.filter(
        user=user, operation__isnull=True, created_at__gte=now - LOOKBACK
    )
    try:
        with transaction.atomic():
            count = pending.count()
            if not count:
                return None
            first = list(
                pending.order_by("created_at", "pk").values_list("pk", "kind", "title", "link")[
                    :DIGEST_ITEMS
                ]
            )
            kinds = dict(OperatorNotice.KINDS)
            items = [{"what": kinds[k], "title": t, "link": link} for _pk, k, t, link in first]
            payload = notice_payload(
                OPERATOR_DIGEST,
                user.email,
                reference=f"operator {user.get_username()}, {timefmt.local(window)}",
                person=user.get_username(),
                count=count,
                items=items,
                interval=minutes,
            )
            op, created = propose_message(
                _key(user, window),
                payload,
                reason=f"{count} item(s) for {user.get_username()}",
                at=now,
            )
            if not created:
                raise _NotNow  # its message is built already: these are not in it
            # Rows locked by another transaction are waited for and read again (READ COMMITTED),
            # so a notice is marked by one message only.
            marked = pending.update(operation=op)
            head = list(
                OperatorNotice.objects.filter(operation=op)
                .order_by("created_at", "pk")
                .values_list("pk", flat=True)[:DIGEST_ITEMS]
            )
            if marked != count or head != [row[0] for row in first]:
                raise _NotNow
    except _NotNow:
        return None
    return op


def run(now=None) -> dict:
    now = now or timezone.now()
    new = collect(now)
    sent = send(now)
    return {"new": new, "sent": len(sent)}
