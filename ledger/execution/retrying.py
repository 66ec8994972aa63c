"""When an operation that was not sent (a transient failure) is tried again, from its schedule
(ledger.policies.retry_schedule): a budget of calls, or e-mail's window of hours.

The window is counted from the first call of the operation's current budget (a person's retry
starts a new one), read from its attempts, so nothing new is stored: the next try's time is
the operation's ``next_attempt_at``, which the item page shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from ledger.policies import RetrySchedule, retry_schedule


@dataclass(frozen=True)
class Retry:
    at: datetime
    words: str  # "retry 4 of 5 in 8s", "next try at 14:05 (e-mail is tried until ...)"
    evidence: dict


def _clock(moment: datetime, *, date: bool = False) -> str:
    local = timezone.localtime(moment)
    return f"{local.day} {local:%b %Y, %H:%M %Z}" if date else f"{local:%H:%M:%S %Z}"


def window_started(op) -> datetime | None:
    """When the current budget's first call began (None: no call recorded)."""
    used = max(op.budget_used, 1)
    starts = (
        op.attempts.filter(kind="call")
        .order_by("-number")
        .values_list("started_at", flat=True)[used - 1 : used]
    )
    return (
        next(iter(starts), None)
        or op.attempts.order_by("number").values_list("started_at", flat=True).first()
    )


def window_end(op, schedule: RetrySchedule | None = None) -> datetime | None:
    schedule = schedule or retry_schedule(op)
    if schedule.window is None:
        return None
    started = window_started(op) or op.last_attempted_at or timezone.now()
    return started + timedelta(seconds=schedule.window)


def next_try(op, now: datetime | None = None) -> Retry | None:
    """The next try after a transient failure, or None: the budget or the window is spent."""
    now = now or timezone.now()
    schedule = retry_schedule(op)
    delay = schedule.delay(op.budget_used)
    if schedule.window is None:
        if op.budget_used >= (schedule.attempts or 1):
            return None
        return Retry(
            now + timedelta(seconds=delay),
            f"retry {op.budget_used + 1} of {schedule.attempts} in {delay:g}s",
            {"delay_seconds": delay},
        )
    until = window_end(op, schedule)
    if now >= until:
        return None
    at = min(now + timedelta(seconds=delay), until)
    return Retry(
        at,
        f"next try at {_clock(at)} (try {op.budget_used + 1}; e-mail is tried until "
        f"{_clock(until, date=True)}, then a person)",
        {"delay_seconds": (at - now).total_seconds(), "tried_until": until.isoformat()},
    )


def spent_words(op, message: str) -> str:
    """Why no try is left, for the journal and the item page: a budget's last error as it was
    said; a window's, with how long it was tried."""
    schedule = retry_schedule(op)
    if schedule.window is None:
        return message
    hours = schedule.window / 3600
    return (
        f"not sent in {hours:g} hour{'s' if hours != 1 else ''} of trying "
        f"({op.budget_used} attempts), the e-mail retry window is spent; last: {message}"
    )
