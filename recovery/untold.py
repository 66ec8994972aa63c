"""Who could not be told: the people whose latest message from Handover was not sent, named on
the dashboard ("Not told: casey — the relay refused the message at 10:15 GMT"), until a later
message to them is sent (recovery.digest carries what it listed into the next window's).

Also named: a person with something to tell and no e-mail address (an admin sets one on the
people page). A person who turned their messages off is not: that is their choice, and the
queue still shows what needs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.utils import timezone

from ledger.models import Operation, OperationState
from recovery import timefmt
from recovery.digest import LOOKBACK, digests, goes_again, not_sent, why_not_told
from recovery.models import NoticePreference, OperatorNotice

# How far back a message not sent still names its person: a week. One refused for good (a wrong
# address) stays in the failed queue after that; a person with news since has a newer message.
HORIZON = timedelta(days=7)


@dataclass
class Untold:
    person: object
    why: str  # in words: "the relay refused the message"
    at: datetime | None  # when it was last tried
    operation: Operation | None  # the message not sent (its page), None: no address
    again: bool  # goes again at the next window by itself
    said_at: str = ""  # when, as the message carrying it says it ("1 Dec 2026, 10:15 GMT")

    @property
    def when(self) -> str:
        """The time alone today, the date and time before."""
        if self.said_at:
            return self.said_at
        if self.at is None:
            return ""
        today = timezone.localdate() == timezone.localtime(self.at).date()
        return timefmt.local(self.at, date=not today)


def _latest_digests(now):
    """Each person's newest message of the last ``HORIZON``, when it was tried and not sent,
    is unknown, or carries one that was not sent: one per person (DISTINCT ON the person),
    read through the messages to operators alone (the only operations with no enquiry)."""
    newest = (
        digests()
        .filter(created_at__gte=now - HORIZON)
        .order_by("payload__person", "-created_at")
        .distinct("payload__person")
        .values("pk")
    )
    return Operation.objects.filter(pk__in=newest).filter(
        Q(state__in=[OperationState.FAILED, OperationState.UNKNOWN])
        | Q(state=OperationState.APPROVED, attempt_count__gt=0)
        | Q(state=OperationState.APPROVED, payload__has_key="earlier")
    )


def untold(now=None) -> list[Untold]:
    now = now or timezone.now()
    found = {}
    users = get_user_model().objects
    for op in _latest_digests(now):
        person_id = int(op.idempotency_key.split(":")[1])
        earlier = (op.payload or {}).get("earlier")
        if not_sent(op) or op.state == OperationState.UNKNOWN:
            found[person_id] = (op, why_not_told(op), op.last_attempted_at or op.created_at, "")
        elif earlier:  # made to carry a message that was not sent; not tried yet
            found[person_id] = (op, earlier.get("why", ""), None, earlier.get("at", ""))
    people = users.in_bulk(found)
    rows = []
    for person_id, (op, why, at, said_at) in found.items():
        person = people.get(person_id)
        if person is None or not person.is_active:
            continue
        again = bool(person.email) and (
            op.state == OperationState.APPROVED or goes_again(op, person.email)
        )
        rows.append(Untold(person, why, at, op, again, said_at))
    # Something to tell and nowhere to send it.
    off = NoticePreference.objects.filter(enabled=False).values("user_id")
    waiting = OperatorNotice.objects.filter(
        operation__isnull=True, left_out="", created_at__gte=now - LOOKBACK
    ).values("user_id")
    for person in users.filter(pk__in=waiting, is_active=True, email="").exclude(pk__in=off):
        rows.append(Untold(person, "no e-mail address", None, None, False))
    return sorted(rows, key=lambda r: r.person.get_username())
