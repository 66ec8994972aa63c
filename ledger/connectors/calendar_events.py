"""A calendar's events as busy time in a window, read within limits (docs/integrations.md, "What a
read may cost").

A recurring event is expanded here, not by the server and not by the caldav library (both expand
whatever a rule says: one ``FREQ=MINUTELY`` event is ten thousand occurrences a week, and one that
began years ago millions of steps before the window opens). Counted, before and during:

- before: each rule's steps from its start to the window's end (its frequency and interval, its
  ``BY`` parts, ``COUNT`` and ``UNTIL``), at most MAX_RULE_STEPS for the whole calendar;
- during: at most CALENDAR_MAX_OCCURRENCES busy times in the window, the expansion stopped at the
  first one past it.

And whatever the counts let through runs in a child process with EXTRACTION_CPU_SECONDS of CPU
and EXTRACTION_MEMORY_MB of memory (ledger.budget). Past any of them: ``TooLarge`` ("too large to
read" / "too slow to read"); an answer that is not iCalendar as RFC 5545 says (a bad
``DURATION``, a rule with no frequency): ``ValueError``. The connector tells both as *invalid*.
"""

from __future__ import annotations

import math
from datetime import date, datetime, time, timedelta

from django.conf import settings
from django.utils import timezone

from ledger import budget

MAX_RULE_STEPS = 100_000  # dateutil walks about 200,000 steps of a rule a second
DEFAULT_MAX_OCCURRENCES = 1000
_FREQ_SECONDS = {
    "SECONDLY": 1,
    "MINUTELY": 60,
    "HOURLY": 3600,
    "DAILY": 86400,
    "WEEKLY": 7 * 86400,
    "MONTHLY": 28 * 86400,
    "YEARLY": 365 * 86400,
}
# Parts of a rule that can give more than one occurrence a step; a weekday under a monthly or
# yearly rule is every such weekday of the month (5) or year (53).
_EXPANDING = ("BYSECOND", "BYMINUTE", "BYHOUR", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYMONTH")
_WEEKDAYS_PER = {"MONTHLY": 5, "YEARLY": 53}


class TooLarge(ValueError):
    """The calendar cannot be read within its limits; ``counted``: what was counted."""

    def __init__(self, message: str, counted: dict | None = None):
        super().__init__(message)
        self.counted = dict(counted or {})

    def __reduce__(self):  # handed from the child process whole
        return (type(self), (str(self), self.counted))


def max_occurrences() -> int:
    return int(getattr(settings, "CALENDAR_MAX_OCCURRENCES", DEFAULT_MAX_OCCURRENCES))


def read_busy(resources, start: datetime, end: datetime):
    """(busy intervals, "href etag" per resource) from ``resources``, a list of (href, etag,
    iCalendar text), in a child process within the CPU and memory budget."""
    cpu = float(getattr(settings, "EXTRACTION_CPU_SECONDS", 10.0))
    memory = int(float(getattr(settings, "EXTRACTION_MEMORY_MB", 512)) * 2**20)
    try:
        return budget.run(busy_times, resources, start, end, cpu_seconds=cpu, memory_bytes=memory)
    except budget.Exceeded as exc:
        words = "too large to read" if exc.what == "memory" else "too slow to read"
        raise TooLarge(f"{words}: its events {exc}", {"cpu_seconds": exc.cpu_seconds}) from exc
    except budget.ChildFailed as exc:
        raise ValueError(str(exc)) from exc


def busy_times(resources, start: datetime, end: datetime):
    """(busy intervals, "href etag" per resource). Transparent and cancelled events free no time
    and take none."""
    import icalendar
    import recurring_ical_events

    limit = max_occurrences()
    busy, etags, steps = [], [], 0
    for href, etag, text in resources:
        etags.append(f"{href} {etag}")
        calendar = icalendar.Calendar.from_ical(text)
        for component in calendar.walk("VEVENT"):
            steps += rule_steps(component, end)
        if steps > MAX_RULE_STEPS:
            raise TooLarge(
                f"too large to read: its recurring events repeat more than {MAX_RULE_STEPS:,} "
                f"times before the window ends ({steps:,})",
                {"steps": steps},
            )
        for occurrence in recurring_ical_events.of(calendar).after(start):
            when = _interval(occurrence)
            if when[0] >= end:
                break
            if not _takes_time(occurrence):
                continue
            busy.append(when)
            if len(busy) > limit:
                raise TooLarge(
                    f"too large to read: more than {limit:,} busy times in the window",
                    {"occurrences": len(busy), "steps": steps},
                )
    busy.sort()
    return busy, etags


def rule_steps(component, end: datetime) -> int:
    """At most how many occurrences ``component``'s rules give from its start to ``end``."""
    rules = component.get("RRULE")
    if rules is None:
        return 1
    rules = rules if isinstance(rules, list) else [rules]
    first = _moment(component.decoded("DTSTART"))
    total = 0
    for rule in rules:
        freq = str((rule.get("FREQ") or [""])[0]).upper()
        if freq not in _FREQ_SECONDS:
            raise ValueError(f"a recurrence rule with no known frequency ({freq or 'none'})")
        interval = max(int((rule.get("INTERVAL") or [1])[0]), 1)
        stop = end
        if rule.get("UNTIL"):
            stop = min(stop, _moment(rule["UNTIL"][0]))
        span = max((stop - first).total_seconds(), 0.0)
        steps = math.floor(span / (_FREQ_SECONDS[freq] * interval)) + 1
        for part in _EXPANDING:
            steps *= max(len(rule.get(part) or ()), 1)
        steps *= max(len(rule.get("BYDAY") or ()), 1) * _WEEKDAYS_PER.get(freq, 1)
        if rule.get("COUNT"):
            steps = min(steps, max(int(rule["COUNT"][0]), 0))
        total += steps
    return total


def _takes_time(component) -> bool:
    if str(component.get("TRANSP", "")).upper() == "TRANSPARENT":
        return False
    return str(component.get("STATUS", "")).upper() != "CANCELLED"


def _interval(component) -> tuple[datetime, datetime]:
    start = _moment(component.decoded("DTSTART"))
    if "DTEND" in component:
        end = _moment(component.decoded("DTEND"))
    elif "DURATION" in component:
        duration = component.decoded("DURATION")
        if not isinstance(duration, timedelta):
            raise ValueError(f"DURATION is not a duration ({str(duration)[:40]!r})")
        end = start + duration
    elif isinstance(component.decoded("DTSTART"), datetime):
        end = start
    else:
        end = start + timedelta(days=1)  # an all-day event without an end: one day
    return start, end


def _moment(value) -> datetime:
    """An iCalendar DATE or DATE-TIME as an aware datetime (floating times and dates are the
    console's TIME_ZONE, where people read them)."""
    if isinstance(value, datetime):
        return value if timezone.is_aware(value) else timezone.make_aware(value)
    if isinstance(value, date):
        return timezone.make_aware(datetime.combine(value, time()))
    raise ValueError(f"not a time: {str(value)[:40]!r}")
