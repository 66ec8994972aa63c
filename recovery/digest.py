"""The operators' message, made from what is true when it is made (recovery.notices gathers).

``send`` gathers each person's notices into one message, at most one per person per
``OPERATOR_NOTICE_MINUTES``: a notify.send operation with no enquiry, whose idempotency key is
made of the person and the window (``operator:<user id>:notify.send:operator_digest:<window>``),
so it goes through the ledger like any message: its Message-ID is made from that key, a failure
is visible in the queue, and nothing is sent twice. People who turned their messages off
(/console/me/) are skipped.

Each notice is read again when the message is made, not when it was gathered:

- an item resolved since (no longer in a queue), or given to someone else, is left out
  (``OperatorNotice.left_out`` says why) and never sent; a message with nothing left is not
  made, and the journal says so (``recovery.notice.not_sent``);
- an item named by several notices (assigned, then overdue) is one line, with every reason;
- each line is worded as the queue words it (the enquiry's reference, what waits, in plain
  words), its link under ``CONSOLE_URL``; the destination's own error text is only the line's
  "technical detail".

A person's earlier message that was not sent goes again with the next window's: one that was
never received (the relay refused the connection, answered 4xx or timed out before the message
went: ``transient``, retries used up or waiting on e-mail's back-off), or one refused for an
address the person no longer has. Its notices are carried into the new message (read again, as
above), and it is cancelled in the same transaction, so only one of the two can ever be sent.
A message that may have arrived (the relay never answered after the message went) is never sent
again by this: a person looks, as for any e-mail.
"""

from __future__ import annotations

from collections import defaultdict, namedtuple
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from intake.models import Enquiry
from ledger import journal
from ledger.models import Action, Integration, Operation, OperationState
from ledger.notices import OPERATOR_DIGEST
from ledger.proposals import notice_payload
from ledger.services import cancel_operation, propose_message
from recovery import ownership, timefmt
from recovery.metrics import stale_queues
from recovery.models import NoticePreference, OperatorNotice, Queue
from recovery.queue.policies import Policies
from recovery.words import GROUP_ATTENTION, action_label

LOOKBACK = timedelta(days=1)  # older events are not news any more
KEY_PREFIX = "operator"
DIGEST_ITEMS = 50  # the message lists the first 50 and counts the rest
DETAIL_CHARS = 160  # a line's technical detail, at most
ACTOR = "system:notices"
RESOLVED, SOMEONE_ELSE = "resolved", "someone else's"
# A notice as the message reads it (a row's columns, not a model object: a person may have
# thousands).
_Notice = namedtuple("_Notice", "pk kind subject why title link")


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


def digests(user=None):
    """Messages to operators (all, or one person's), newest first."""
    ops = Operation.objects.filter(
        enquiry__isnull=True,
        action=Action.SEND_NOTICE,
        idempotency_key__startswith=f"{KEY_PREFIX}:{user.pk}:" if user else f"{KEY_PREFIX}:",
    )
    return ops.order_by("-created_at")


def queue_link(queue: str) -> str:
    """The console page that opens one queue, filtered to it (the queue page's ``state``; the
    review queue is its own page)."""
    if queue == Queue.REVIEW:
        return reverse("recovery:review")
    return reverse("recovery:queue") + f"?state={queue}"


def not_sent(op) -> bool:
    """Tried and not sent for now: failed, or waiting on e-mail's back-off after the relay
    refused it or could not be reached (``transient``)."""
    if op.state == OperationState.FAILED:
        return True
    return (
        op.state == OperationState.APPROVED
        and op.attempt_count > 0
        and op.last_error_class == "transient"
    )


def goes_again(op, address: str) -> bool:
    """Whether an earlier message of the person's goes again with the next window's: nothing of
    it reached the relay (``transient``), or it was refused for an address they no longer
    have. Not one in a worker's hands (``lease_owner``), not one that may have arrived."""
    if not not_sent(op) or op.lease_owner:
        return False
    if op.last_error_class == "transient":
        return True
    return op.state == OperationState.FAILED and (op.payload or {}).get("to") != address


def why_not_told(op) -> str:
    """Why a message was not sent, in a few plain words (its technical detail is on its page)."""
    kind, status = op.last_error_class, op.last_error_status
    if op.state == OperationState.UNKNOWN:
        return "the relay never answered once the message had gone (it may have arrived)"
    if op.attention == "delivery_failed":
        return "the message could not be delivered"
    if kind == "auth":
        return "the relay refused Handover's log-in"
    if kind == "transient" and status is None:
        return "the relay could not be reached"
    if kind == "transient":
        return f"the relay refused the message for now ({status})"
    if kind == "invalid" and status and "recipient" in (op.last_error_message or ""):
        return f"the relay refused the address ({status})"
    if kind == "invalid" and status:
        return f"the relay refused the message ({status})"
    return "the message could not be sent"


# --- what each item is now ----------------------------------------------------------------------


class _Now:
    """The subjects of some notices as they are now, each read once (a query per kind)."""

    def __init__(self, notices, now):
        by_kind = defaultdict(set)
        for n in notices:
            kind, _, key = (n.subject or "").partition(":")
            by_kind[kind].add(key)
        self.ops = {
            str(op.pk): op
            for op in Operation.objects.filter(pk__in=by_kind["operation"]).select_related(
                "enquiry"
            )
        }
        self.enquiries = {
            e.reference: e for e in Enquiry.objects.filter(reference__in=by_kind["enquiry"])
        }
        self.integrations = {
            i.name: i
            for i in Integration.objects.filter(
                name__in=by_kind["integration"] | by_kind["backlog"]
            )
        }
        self.flags = {}
        if by_kind["queue"]:
            self.flags = {f.queue: f for f in stale_queues(now)}
        self.policies = Policies.load()
        # A queue's owner as _uninspected in recovery.notices reads it: its row's, else the
        # default row's.
        rows = self.policies.rows
        self.queue_owners = {
            p["queue"]: p["owner_id"] for p in rows if p["integration_id"] is None and p["owner_id"]
        }
        self.admins = {u.pk for u in ownership.admins()}

    def _theirs(self, user, owner_id, queue, integration_id=None) -> bool:
        if owner_id is None:
            owner_id = self.policies.value(queue, integration_id, "owner_id")
        return user.pk == owner_id if owner_id is not None else user.pk in self.admins

    def line(self, notice, user) -> tuple[dict | None, str]:
        """(the line for this notice's subject, or None and why it is left out)."""
        kind, _, key = (notice.subject or "").partition(":")
        if kind == "operation":
            return self._operation(self.ops.get(key), user)
        if kind == "enquiry":
            return self._enquiry(self.enquiries.get(key), user)
        if kind == "queue":
            return self._queue(self.flags.get(key), user)
        if kind == "backlog":
            return self._backlog(self.integrations.get(key), user)
        if kind == "integration":
            found = self.integrations.get(key)
            if found is None:
                return None, RESOLVED
            if found.owner_id != user.pk:
                return None, SOMEONE_ELSE
            title = f"The {found} integration refused Handover's credentials"
            return {"title": title, "link": reverse("recovery:integrations")}, ""
        # Gathered before notices named their subject: as it read then.
        return {"title": notice.title, "link": notice.link}, ""

    def _operation(self, op, user):
        queue = ownership.operation_queue(op) if op is not None else None
        if queue is None:
            return None, RESOLVED
        if not self._theirs(user, op.owner_id, queue, op.integration_id):
            return None, SOMEONE_ELSE
        what = action_label(op.action) if op.enquiry_id else "Tell an operator what needs them"
        state = "failed" if op.state == OperationState.FAILED else "outcome unknown"
        if op.attention:
            state += ", " + GROUP_ATTENTION.get(op.attention, op.attention.replace("_", " "))
        detail = " ".join((op.last_error_message or "").split())
        if len(detail) > DETAIL_CHARS:
            detail = detail[: DETAIL_CHARS - 1] + "…"
        return {
            "title": f"{op.reference}: {what} ({state})",
            "link": reverse("recovery:operation", args=[op.pk]),
            "detail": detail,
        }, ""

    def _backlog(self, integration, user):
        if integration is None or not (integration.paused or integration.awaiting_backlog_review):
            return None, RESOLVED
        if not self._theirs(user, None, Queue.PAUSED, integration.pk):
            return None, SOMEONE_ELSE
        state = "paused" if integration.paused else "its backlog waits for review before release"
        return {
            "title": f"The {integration} integration: {state}",
            "link": reverse("recovery:backlog", args=[integration.name]),
        }, ""

    def _enquiry(self, enquiry, user):
        queue = ownership.enquiry_queue(enquiry) if enquiry is not None else None
        if queue is None:
            return None, RESOLVED
        if not self._theirs(user, enquiry.owner_id, queue):
            return None, SOMEONE_ELSE
        return {
            "title": f"{enquiry.reference}: {ownership.queue_label(queue)}",
            "link": reverse("recovery:enquiry", args=[enquiry.reference]),
        }, ""

    def _queue(self, flag, user):
        if flag is None or not flag.stale:
            return None, RESOLVED
        owner_id = self.queue_owners.get(flag.queue) or self.queue_owners.get("")
        if owner_id != user.pk:
            return None, SOMEONE_ELSE
        opened = timefmt.local(flag.last_opened) if flag.last_opened else "never"
        many = flag.items != 1
        waiting = f"; {flag.items} item{'s' * many} wait{'s' * (not many)} in it" * bool(flag.items)
        return {
            "title": f"Nobody opened the queue “{flag.label}” (last opened: {opened}){waiting}",
            "link": queue_link(flag.queue),
        }, ""


def lines(notices, user, now) -> tuple[list[dict], dict]:
    """(the message's lines, {why left out: [notice ids]}) for a person's notices, oldest
    first: one line per subject, with every reason it is news."""
    current = _Now(notices, now)
    kinds = dict(OperatorNotice.KINDS)
    found, left = [], defaultdict(list)
    where, gone = {}, {}
    for n in notices:
        subject = n.subject or f"notice:{n.pk}"
        if subject in gone:
            left[gone[subject]].append(n.pk)
            continue
        if subject in where:
            index = where[subject]
        else:
            line, why_not = current.line(n, user)
            if line is None:
                gone[subject] = why_not
                left[why_not].append(n.pk)
                continue
            index = where[subject] = len(found)
            found.append({**line, "why": []})
        why = n.why or kinds.get(n.kind, n.kind)
        if why not in found[index]["why"]:
            found[index]["why"].append(why)
    for line in found:
        line["why"] = "; ".join(line["why"])
    return found, dict(left)


# --- the message ----------------------------------------------------------------------------------


def send(now=None) -> list[Operation]:
    """One message per person with something still to tell, at most one per interval: the batch,
    as a notify.send operation (no enquiry) approved and enqueued with its notices marked."""
    now = now or timezone.now()
    minutes = settings.OPERATOR_NOTICE_MINUTES
    # Two reads, each through its own path: the notices no message carries yet (the partial
    # index notice_pending), and those of messages tried and not sent (from the few such rows).
    pending = set(
        OperatorNotice.objects.filter(
            operation__isnull=True, created_at__gte=now - LOOKBACK, left_out=""
        )
        .order_by()
        .values_list("user_id", flat=True)
        .distinct()
    )
    not_sent_yet = digests().filter(
        state__in=[OperationState.FAILED, OperationState.APPROVED], attempt_count__gt=0
    )
    pending.update(
        OperatorNotice.objects.filter(operation__in=not_sent_yet, left_out="").values_list(
            "user_id", flat=True
        )
    )
    sent = []
    for user in get_user_model().objects.filter(pk__in=pending, is_active=True).order_by("pk"):
        if not user.email or not enabled(user):
            continue
        last = digests(user).values_list("created_at", flat=True).first()
        if last is not None and last > now - timedelta(minutes=minutes):
            continue  # at most one per interval: the next window carries these
        op = _send_one(user, now, minutes)
        if op is not None:
            sent.append(op)
    return sent


class _NotNow(Exception):
    """The message is not made this time; its transaction is rolled back and the notices wait."""


def _carried(user) -> list[Operation]:
    """The person's earlier messages that go again now, locked (a worker claiming one waits,
    then finds it cancelled)."""
    earlier = digests(user).filter(
        state__in=[OperationState.FAILED, OperationState.APPROVED], attempt_count__gt=0
    )
    return [op for op in earlier.select_for_update(of=("self",)) if goes_again(op, user.email)]


def _send_one(user, now, minutes):
    """The person's notices as one message, in one transaction: the notices not yet in a message
    and those of earlier messages that go again, read again as they are now; the left-out ones
    marked with why; the message proposed; its notices marked; the earlier messages cancelled.
    If the window's message exists already (made by a concurrent sender, or earlier in this
    window), or a mark does not carry exactly what was read (a notice came or went meanwhile),
    nothing is sent now: the transaction rolls back and the notices wait for the next run. A
    crash rolls everything back the same way."""
    window = window_start(now, minutes)
    try:
        with transaction.atomic():
            earlier = _carried(user)
            theirs = OperatorNotice.objects.filter(
                Q(operation__isnull=True, created_at__gte=now - LOOKBACK)
                | Q(operation__in=earlier),
                user=user,
                left_out="",
            )
            notices = [
                _Notice(*row)
                for row in theirs.order_by("created_at", "pk").values_list(*_Notice._fields)
            ]
            if not notices:
                return None
            found, left = lines(notices, user, now)
            for why_not, ids in left.items():
                if theirs.filter(pk__in=ids).update(left_out=why_not) != len(ids):
                    raise _NotNow  # taken by a concurrent sender meanwhile
            gone = sum(len(ids) for ids in left.values())
            if not found:
                _nothing_left(user, earlier, left)
                return None
            payload = notice_payload(
                OPERATOR_DIGEST,
                user.email,
                reference=f"operator {user.get_username()}, {timefmt.local(window)}",
                person=user.get_username(),
                count=len(found),
                items=found[:DIGEST_ITEMS],
                interval=minutes,
                **_earlier_words(earlier),
            )
            reason = f"{len(found)} item(s) for {user.get_username()}"
            if gone:
                reason += f"; {gone} left out (resolved or given to someone else since)"
            op, created = propose_message(_key(user, window), payload, reason=reason, at=now)
            if not created:
                raise _NotNow  # its message is built already: these are not in it
            # Marked by the same condition they were read by, set-based (no list of ids): rows
            # locked by another transaction are waited for and read again (READ COMMITTED), so a
            # notice is marked by one message only, and the mark must carry exactly what the
            # message was made from, or nothing is sent now.
            if theirs.update(operation=op) != len(notices) - gone:
                raise _NotNow
            for old in earlier:
                cancel_operation(
                    old.pk,
                    actor=ACTOR,
                    reason=f"not sent; what it listed goes again in the next message ({op.pk})",
                )
    except _NotNow:
        return None
    return op


def _earlier_words(earlier) -> dict:
    if not earlier:
        return {}
    first = min(earlier, key=lambda o: o.created_at)
    return {
        "earlier": {
            "at": timefmt.local(first.last_attempted_at or first.created_at),
            "why": why_not_told(first),
        }
    }


def _nothing_left(user, earlier, left) -> None:
    counts = {why: len(ids) for why, ids in left.items()}
    for old in earlier:
        cancel_operation(old.pk, actor=ACTOR, reason="not sent; nothing it listed needs them now")
    journal.record(
        user,
        "recovery.notice.not_sent",
        actor=ACTOR,
        reason=f"Nothing left to tell {user.get_username()}: "
        + ", ".join(f"{n} item(s) {why} since" for why, n in sorted(counts.items())),
        evidence={"left_out": counts, "earlier": [str(o.pk) for o in earlier]},
    )
