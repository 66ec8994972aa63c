"""One way to show a moment in the console: local time (settings.TIME_ZONE), 24-hour clock, with
its zone's abbreviation ("1 Dec 2026, 14:05 GMT"). Pages, plain-words answers, messages and
escalation reasons all use it, so no page mixes 12- and 24-hour clocks or UTC and local time."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def local(value: datetime | None, *, date: bool = True, seconds: bool = False) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):  # an ISO 8601 moment from a stored report
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_default_timezone())
    moment = timezone.localtime(value, timezone.get_default_timezone())
    clock = moment.strftime("%H:%M:%S" if seconds else "%H:%M")
    zone = moment.strftime("%Z")
    if not date:
        return f"{clock} {zone}"
    return f"{moment.day} {moment.strftime('%b %Y')}, {clock} {zone}"
