"""The ``handover`` contract's appointments connector against the real sandbox process: one
request per working day read, taken slots as busy time, the same result shape as CalDAV's."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.utils import timezone

from ledger import appointments
from ledger.models import OperationState
from ledger.services import request_slots, slots_view
from sandbox.services.appointments import appointment_slots

pytestmark = pytest.mark.slow


def test_a_read_of_the_sandbox_takes_its_taken_slots_as_busy(
    sandbox, integrations, visit_enquiry, reviewer, run_queue
):
    enquiry = visit_enquiry()
    op, how = request_slots(enquiry.pk, actor=reviewer, reason="slots for review")
    assert how == "requested"
    run_queue(until=lambda: op.refresh_from_db() or op.state == OperationState.CONFIRMED)

    days = appointments.working_days(datetime.fromisoformat(op.result["as_of"]), 5)
    assert sandbox.stats()["requests"]["appointments.list"] == len(days) == 5
    taken = {
        (datetime.fromisoformat(s["start"]), datetime.fromisoformat(s["end"]))
        for day in days
        for s in appointment_slots(day)
        if not s["available"]
    }
    busy = set(appointments.from_text(op.result["busy"]))
    assert busy and busy <= taken  # only those inside the read's window
    assert op.result["version"] == {}  # the contract has no version
    slots = appointments.from_text(op.result["slots"])
    assert slots
    for start, end in slots:
        assert not any(b0 < end and start < b1 for b0, b1 in busy)
        assert start >= datetime.fromisoformat(op.result["as_of"])
    view = slots_view(enquiry, now=timezone.now())
    assert view.state == "fresh" and view.read == op


def test_a_refused_day_fails_the_read_visibly(
    sandbox, integrations, visit_enquiry, reviewer, run_queue
):
    sandbox.fault("appointments.list", "error_422", count=1)
    enquiry = visit_enquiry()
    op, _ = request_slots(enquiry.pk, actor=reviewer, reason="slots for review")
    run_queue(until=lambda: op.refresh_from_db() or op.state == OperationState.FAILED)
    assert op.attention == "invalid"
    assert slots_view(enquiry).state == "failed"


def test_more_taken_slots_than_the_limit_are_too_large_to_read(
    sandbox, integrations, visit_enquiry, reviewer, run_queue, settings
):
    settings.CALENDAR_MAX_OCCURRENCES = 1
    enquiry = visit_enquiry()
    op, _ = request_slots(enquiry.pk, actor=reviewer, reason="slots for review")
    run_queue(until=lambda: op.refresh_from_db() or op.state == OperationState.FAILED)
    assert (op.attention, op.attempt_count) == ("invalid", 1)
    assert "too large to read: more than 1 taken slots in the window" in op.last_error_message
