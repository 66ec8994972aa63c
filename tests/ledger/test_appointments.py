"""ledger/appointments.py: which days a read covers, free slots from busy time, and age."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from django.utils import timezone

from ledger import appointments
from ledger.appointments import Hours

H = Hours(open_hour=9, close_hour=12, slot_minutes=60, days=2)


def at(day, hour, minute=0):
    return timezone.make_aware(datetime(day.year, day.month, day.day, hour, minute))


FRIDAY = date(2030, 3, 8)
MONDAY = date(2030, 3, 11)


def test_working_days_skip_the_weekend():
    assert appointments.working_days(at(FRIDAY, 8), 2) == [FRIDAY, MONDAY]
    assert appointments.working_days(at(date(2030, 3, 9), 8), 1) == [MONDAY]  # a Saturday


def test_free_slots_start_after_now_and_miss_every_busy_interval():
    now = at(FRIDAY, 9, 30)
    busy = [(at(MONDAY, 10, 15), at(MONDAY, 10, 45))]  # inside one slot: that slot is taken
    slots = appointments.free_slots(busy, now, H)
    assert slots == [
        (at(FRIDAY, 10), at(FRIDAY, 11)),
        (at(FRIDAY, 11), at(FRIDAY, 12)),
        (at(MONDAY, 9), at(MONDAY, 10)),
        (at(MONDAY, 11), at(MONDAY, 12)),
    ]
    # Touching is not overlapping: a meeting ending at 10:00 leaves the 10:00 slot free.
    touching = [(at(MONDAY, 9), at(MONDAY, 10))]
    assert (at(MONDAY, 10), at(MONDAY, 11)) in appointments.free_slots(touching, now, H)


def test_a_read_result_keeps_only_busy_time_in_its_window():
    now = at(FRIDAY, 8)
    busy = [(at(FRIDAY, 9), at(FRIDAY, 10)), (at(MONDAY, 20), at(MONDAY, 21))]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(appointments, "hours", lambda: H)
        result = appointments.read_result(as_of=now, busy=busy, version={}, max_age_seconds=60)
    assert result["window"] == [now.isoformat(), at(MONDAY, 12).isoformat()]
    assert result["busy"] == [[at(FRIDAY, 9).isoformat(), at(FRIDAY, 10).isoformat()]]
    assert len(result["slots"]) == 5


def test_age_and_freshness():
    now = at(FRIDAY, 9)
    result = {"as_of": (now - timedelta(seconds=61)).isoformat()}
    assert appointments.age_seconds(result, now) == 61
    assert not appointments.is_fresh(result, 60, now)
    assert appointments.is_fresh(result, 61, now)
    assert appointments.age_seconds({"as_of": "not a time"}, now) is None
    assert not appointments.is_fresh({}, 60, now)  # no as_of: never fresh
    assert appointments.from_text([["bad", "worse"], [now.isoformat(), now.isoformat()]]) == [
        (now, now)
    ]
