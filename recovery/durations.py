"""Durations as people write them: "90 s", "15 min", "4 h", "1 d", "1 h 30 min", "2.5 s".

One parser and one formatter for every duration an admin enters or reads in the console and
the admin (response periods, review cadences, integration timeouts and delays), instead of
Django's "1 day, 0:00:00" and its "Enter a valid duration". ``format_duration`` writes what
``parse_duration`` reads back to the same value.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from django import forms
from django.core.exceptions import ValidationError

from recovery import messages

UNITS = {
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "w": 7 * 86400,
    "week": 7 * 86400,
    "weeks": 7 * 86400,
}
# Largest first; what format_duration writes.
WRITTEN = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
EXAMPLES = "90 s, 15 min, 4 h, 1 d or 1 h 30 min"
_PART = re.compile(r"\s*([0-9]+(?:[.,][0-9]+)?)\s*([a-z]+)\s*,?", re.IGNORECASE)
MAX_TEXT = 60


class NotADuration(ValueError):
    """The text is not a duration; the message says what to write instead."""


def parse_duration(text: str) -> timedelta:
    """ "1 h 30 min" -> timedelta(hours=1, minutes=30). Raises NotADuration, never anything
    else, whatever the text."""
    text = (text or "").strip()
    if not text:
        raise NotADuration(messages.DURATION_EXPECTED % {"examples": EXAMPLES})
    shown = text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"
    if len(text) > MAX_TEXT:
        raise NotADuration(messages.DURATION_TOO_LONG % {"text": shown, "examples": EXAMPLES})
    if re.fullmatch(r"[0-9]+(?:[.,][0-9]+)?", text):
        raise NotADuration(messages.DURATION_NEEDS_UNIT % {"text": shown, "examples": EXAMPLES})
    seconds = Decimal(0)
    position, seen = 0, set()
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        number, unit = match.groups()
        factor = UNITS.get(unit.lower())
        if factor is None:
            raise NotADuration(
                messages.DURATION_UNKNOWN_UNIT % {"unit": unit, "text": shown, "examples": EXAMPLES}
            )
        if factor in seen:
            raise NotADuration(messages.DURATION_UNIT_TWICE % {"text": shown})
        seen.add(factor)
        try:
            seconds += Decimal(number.replace(",", ".")) * factor
        except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
            break
        position = match.end()
    if position != len(text) or not seen:
        raise NotADuration(messages.DURATION_UNREADABLE % {"text": shown, "examples": EXAMPLES})
    if seconds > 366 * 86400:
        raise NotADuration(messages.DURATION_OVER_A_YEAR % {"text": shown})
    return timedelta(seconds=float(seconds))


def format_duration(value) -> str:
    """A timedelta or a number of seconds as people write it: "1 h 30 min", "2.5 s", "0 s".

    Exact (nothing is rounded away but microseconds), so what is shown is what is stored."""
    if value is None or value == "":
        return ""
    if isinstance(value, timedelta):
        seconds = Decimal(value.days * 86400 + value.seconds) + Decimal(value.microseconds) / (
            10**6
        )
    else:
        seconds = Decimal(str(value))
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    whole, fraction = int(seconds), seconds - int(seconds)
    parts = []
    for unit, size in WRITTEN:
        count, whole = divmod(whole, size)
        if unit == "s" and fraction:
            text = f"{(count + fraction).normalize():f}"
            parts.append(f"{text} s")
        elif count:
            parts.append(f"{count} {unit}")
    return sign + (" ".join(parts) if parts else "0 s")


class DurationField(forms.Field):
    """A form field for a duration typed as people write it; cleans to a timedelta.

    ``minimum``/``maximum`` (timedeltas) bound it with a message in the same words.
    """

    widget = forms.TextInput

    def __init__(self, *, minimum=None, maximum=None, **kwargs):
        self.minimum, self.maximum = minimum, maximum
        kwargs.setdefault("help_text", f"e.g. {EXAMPLES}")
        super().__init__(**kwargs)

    def widget_attrs(self, widget):
        attrs = super().widget_attrs(widget)
        attrs.update({"placeholder": "e.g. 1 h 30 min", "spellcheck": "false", "maxlength": "60"})
        return attrs

    def prepare_value(self, value):
        if isinstance(value, (timedelta, int, float, Decimal)):
            return format_duration(self.to_timedelta(value))
        return value

    @staticmethod
    def to_timedelta(value) -> timedelta:
        return value if isinstance(value, timedelta) else timedelta(seconds=float(value))

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except NotADuration as exc:
            raise ValidationError(str(exc), code="invalid") from None

    def validate(self, value):
        super().validate(value)
        if value is None:
            return
        if self.minimum is not None and value < self.minimum:
            raise ValidationError(
                messages.AT_LEAST % {"duration": format_duration(self.minimum)}, code="min_value"
            )
        if self.maximum is not None and value > self.maximum:
            raise ValidationError(
                messages.AT_MOST % {"duration": format_duration(self.maximum)}, code="max_value"
            )


class SecondsField(DurationField):
    """The same, for a model field that stores seconds as a number (ledger.Integration)."""

    def clean(self, value):
        cleaned = super().clean(value)
        return None if cleaned is None else cleaned.total_seconds()

    def has_changed(self, initial, data):
        try:
            data = self.to_python(data)
        except ValidationError:
            return True
        initial = None if initial in (None, "") else self.to_timedelta(initial)
        return initial != data
