"""Appointment slots for an enquiry that needs a visit: ask for a read, and say what the last
read shows and how old it is.

A read is an operation (``appointments.read``) run by a worker through the appointments
integration's kind, never in a web request. Its policy: check first whether the last read is
still fresh (then nothing is read); otherwise a new read, system-approved, with the
integration's retry budget (a read that keeps failing ends `failed`, owned by the
integration's owner, in the queue). A read older than the integration's maximum age is never
shown as current: the page says it is stale, with its age, and asks for a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from intake.models import Enquiry
from ledger import appointments
from ledger.models import Action, Integration, Operation, OperationState
from ledger.proposals import integration, propose

ACTION = Action.READ_APPOINTMENTS
IN_FLIGHT = (
    OperationState.PROPOSED,
    OperationState.APPROVED,
    OperationState.SUBMITTED,
    OperationState.UNKNOWN,
)


def needs_visit(enquiry) -> bool:
    """Its current revision's category is one an admin marked as needing a visit."""
    revision = enquiry.revisions.filter(number=enquiry.current_revision).first()
    category = revision.category if revision is not None else None
    return bool(category is not None and category.books_appointments)


def _reads(enquiry_id):
    return Operation.objects.filter(enquiry_id=enquiry_id, action=ACTION).order_by(
        "-created_at", "-pk"
    )


def request_slots(enquiry_id, *, actor, reason) -> tuple[Operation | None, str]:
    """A fresh read unless one is fresh or under way: (the read, "fresh" | "in_flight" |
    "requested"). Locks the enquiry, so two reviewers asking at once make one read."""
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id)
        reads = list(_reads(enquiry.pk))
        latest = reads[0] if reads else None
        if latest is not None and latest.state in IN_FLIGHT:
            return latest, "in_flight"
        row = integration(Integration.APPOINTMENTS)
        now = timezone.now()
        confirmed = next((op for op in reads if op.state == OperationState.CONFIRMED), None)
        if confirmed is not None and appointments.is_fresh(
            confirmed.result, row.max_age_seconds, now
        ):
            return confirmed, "fresh"
        number = len(reads) + 1
        op, _ = propose(
            enquiry,
            ACTION,
            {"read": number},
            revision=enquiry.current_revision,
            detail=f"read{number}",
            actor=actor,
            approve=True,
            reason=reason,
        )
    return op, "requested"


@dataclass
class SlotsView:
    """What the review page shows about slots (recovery's card)."""

    state: str  # none, reading, fresh, stale, failed
    max_age_seconds: float
    read: Operation | None = None  # the last confirmed read
    latest: Operation | None = None  # the last read of any state
    as_of: datetime | None = None
    age_seconds: float | None = None
    slots: list[tuple[datetime, datetime]] = field(default_factory=list)
    free_in_window: int = 0
    window_end: datetime | None = None
    changed: bool = False  # the calendar's version differs from the read before
    version: dict = field(default_factory=dict)

    @property
    def polling(self) -> bool:
        return self.state == "reading"

    @property
    def asks_for_read(self) -> bool:
        """Stale or never read, and nothing under way or failed: the page asks for a read."""
        return self.state in ("none", "stale")


def slots_view(enquiry, *, now=None) -> SlotsView:
    now = now or timezone.now()
    row = integration(Integration.APPOINTMENTS)
    reads = list(_reads(enquiry.pk)[:20])
    latest = reads[0] if reads else None
    confirmed = [op for op in reads if op.state == OperationState.CONFIRMED]
    read = confirmed[0] if confirmed else None
    view = SlotsView(state="none", max_age_seconds=row.max_age_seconds, latest=latest, read=read)
    if read is not None:
        result = read.result or {}
        as_of = result.get("as_of")
        view.as_of = datetime.fromisoformat(as_of) if as_of else None
        view.age_seconds = appointments.age_seconds(result, now)
        upcoming = [s for s in appointments.from_text(result.get("slots")) if s[0] >= now]
        view.free_in_window = len(upcoming)
        view.slots = upcoming[: appointments.SHOWN]
        window = appointments.from_text([result.get("window") or []])
        view.window_end = window[0][1] if window else None
        view.version = result.get("version") or {}
        earlier = confirmed[1].result.get("version") if len(confirmed) > 1 else None
        view.changed = bool(earlier and view.version and earlier != view.version)
        fresh = appointments.is_fresh(result, row.max_age_seconds, now)
        view.state = "fresh" if fresh else "stale"
    if latest is not None and latest is not read:
        if latest.state in IN_FLIGHT:
            view.state = "reading"
        elif latest.state == OperationState.FAILED and not (read and view.state == "fresh"):
            view.state = "failed"
    return view
