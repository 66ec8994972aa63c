"""The fake appointments service: ``GET /appointments?date=YYYY-MM-DD``, read-only, stateless."""

from __future__ import annotations

import hashlib
import re
from datetime import date, datetime, timedelta
from typing import Any

from sandbox.http import HttpError, Request, Response, route
from sandbox.store import Store, iso, utc_now

APPOINTMENT_MAX_AGE_SECONDS = 300
APPOINTMENT_DAY = (9, 17)  # opening hours, UTC
APPOINTMENT_SLOT_MINUTES = 30


def slots_for_day(store: Store, request: Request) -> Response:
    raw = request.param("date") or ""
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
            raise ValueError(raw)
        day = date.fromisoformat(raw)
    except ValueError as exc:
        raise HttpError(400, "invalid_date", "'date' must be YYYY-MM-DD") from exc
    return Response(
        200,
        {
            "date": day.isoformat(),
            "slots": appointment_slots(day),
            "as_of": iso(utc_now()),
            "max_age_seconds": APPOINTMENT_MAX_AGE_SECONDS,
        },
    )


def appointment_slots(day: date) -> list[dict[str, Any]]:
    """Deterministic slots for a day: same date, same answer, across processes and restarts."""
    opening, closing = APPOINTMENT_DAY
    start = datetime(day.year, day.month, day.day, opening, tzinfo=utc_now().tzinfo)
    end_of_day = start.replace(hour=closing)
    step = timedelta(minutes=APPOINTMENT_SLOT_MINUTES)
    slots = []
    while start < end_of_day:
        digest = hashlib.sha256(start.isoformat().encode()).digest()
        slots.append(
            {
                "start": start.isoformat(),
                "end": (start + step).isoformat(),
                "available": digest[0] % 4 != 0,  # about three in four slots are free
            }
        )
        start += step
    return slots


ROUTES = [route("GET", r"/appointments", slots_for_day, "appointments.list")]
