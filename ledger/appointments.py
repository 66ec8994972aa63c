"""Appointment slots: the window a read covers, free slots from busy time, and how old a read is.

Pure functions; no database, no HTTP. A read (``appointments.read``, run by a worker through
the appointments integration's kind) stores on its operation::

    {"as_of": ISO, "max_age_seconds": 300.0, "window": [ISO, ISO],
     "busy": [[ISO, ISO], ...], "slots": [[ISO, ISO], ...], "version": {...} or {}}

``as_of`` is when the answer was true: the moment the request was sent (the server's answer
was made after it, so the age is never understated). ``max_age_seconds`` is the integration's
maximum age when it was read; freshness is judged with the row's value now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta

from django.conf import settings
from django.utils import timezone

WEEKDAYS = range(5)  # Monday to Friday: days with opening hours
SHOWN = 6  # the next free slots the review page lists


@dataclass(frozen=True)
class Hours:
    open_hour: int
    close_hour: int
    slot_minutes: int
    days: int  # working days from today


def hours() -> Hours:
    return Hours(
        settings.APPOINTMENTS_OPEN_HOUR,
        settings.APPOINTMENTS_CLOSE_HOUR,
        settings.APPOINTMENTS_SLOT_MINUTES,
        settings.APPOINTMENTS_DAYS,
    )


def working_days(now: datetime, days: int) -> list:
    """Today (in TIME_ZONE) and the following days with opening hours, ``days`` of them."""
    local = timezone.localtime(now).date()
    found = []
    while len(found) < days:
        if local.weekday() in WEEKDAYS:
            found.append(local)
        local += timedelta(days=1)
    return found


def window(now: datetime, h: Hours | None = None) -> tuple[datetime, datetime]:
    """From now to the close of the last working day the read covers."""
    h = h or hours()
    last = working_days(now, h.days)[-1]
    end = timezone.make_aware(datetime.combine(last, time(h.close_hour)))
    return now, end


def free_slots(busy, now: datetime, h: Hours | None = None) -> list[tuple[datetime, datetime]]:
    """Every slot of opening hours in the window that starts after ``now`` and overlaps no
    busy interval. ``busy``: (start, end) aware datetimes."""
    h = h or hours()
    step = timedelta(minutes=h.slot_minutes)
    slots = []
    for day in working_days(now, h.days):
        start = timezone.make_aware(datetime.combine(day, time(h.open_hour)))
        close = timezone.make_aware(datetime.combine(day, time(h.close_hour)))
        while start + step <= close:
            end = start + step
            if start >= now and not any(b0 < end and start < b1 for b0, b1 in busy):
                slots.append((start, end))
            start = end
    return slots


def as_text(pairs) -> list[list[str]]:
    return [[a.isoformat(), b.isoformat()] for a, b in pairs]


def from_text(pairs) -> list[tuple[datetime, datetime]]:
    found = []
    for pair in pairs or []:
        try:
            a, b = (datetime.fromisoformat(str(v)) for v in pair)
        except (TypeError, ValueError):
            continue  # a read stored by an older shape: shown as nothing rather than wrong
        found.append((a, b))
    return found


def age_seconds(result: dict, now: datetime) -> float | None:
    try:
        as_of = datetime.fromisoformat(str(result.get("as_of")))
        return max(0.0, (now - as_of).total_seconds())
    except (TypeError, ValueError):  # no time, or one without a zone: no age can be told
        return None


def is_fresh(result: dict, max_age_seconds: float, now: datetime) -> bool:
    age = age_seconds(result, now)
    return age is not None and age <= max_age_seconds


def read_result(*, as_of: datetime, busy, version: dict, max_age_seconds) -> dict:
    """What an ``appointments.read`` stores: the shape every kind's connector returns."""
    start, end = window(as_of)
    busy = sorted((b0, b1) for b0, b1 in busy if b0 < end and start < b1)
    return {
        "as_of": as_of.isoformat(),
        "max_age_seconds": float(max_age_seconds),
        "window": [start.isoformat(), end.isoformat()],
        "busy": as_text(busy),
        "slots": as_text(free_slots(busy, as_of)),
        "version": version,
    }
