"""Appointment slots: a reviewer's read of a day, and what the latest read says."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from intake.models import Enquiry
from ledger.models import Op, Operation
from ledger.services.proposals import propose


def request_appointment_slots(enquiry_id, *, actor, day) -> Operation:
    """A reviewer needs slots: a system-approved read, run by a worker. A stale earlier read of
    the same day is read again (a new operation; the old one keeps what it saw)."""
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry_id)
        day = str(day)
        earlier = Operation.objects.filter(
            enquiry=enquiry, action="appointments.read", payload__date=day
        ).count()
        op, _ = propose(
            enquiry,
            "appointments.read",
            {"date": day},
            revision=enquiry.current_revision,
            detail=f"{day}#{earlier + 1}",
            actor=actor,
            approve=True,
            reason=f"slots for {day}",
        )
    return op


def appointment_slots(enquiry_id, day) -> dict:
    """The latest read for that day and whether it is still fresh; stale data says so."""
    op = (
        Operation.objects.filter(
            enquiry_id=enquiry_id, action="appointments.read", payload__date=str(day)
        )
        .order_by("-created_at")
        .first()
    )
    if op is None:
        return {"operation": None, "slots": [], "as_of": None, "fresh": False, "state": "none"}
    result = op.result or {}
    fresh = False
    if op.state == Op.CONFIRMED and result.get("as_of"):
        as_of = datetime.fromisoformat(result["as_of"])
        max_age = timedelta(seconds=float(result.get("max_age_seconds") or 0))
        fresh = timezone.now() <= as_of + max_age
    return {
        "operation": op,
        "slots": result.get("slots", []),
        "as_of": result.get("as_of"),
        "fresh": fresh,
        "state": op.state,
    }
