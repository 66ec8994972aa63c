"""The caldav kind against a real CalDAV server (Radicale, harness/radicale.py), the engine run
in this process, faults from the fault proxy. Every test reads what the server holds (its own
listing, its ctag) beside the ledger's rows."""

from __future__ import annotations

from datetime import datetime, time, timedelta

import pytest
import time_machine
from django.utils import timezone

from ledger import appointments
from ledger.kinds import KINDS
from ledger.models import Integration, Operation, OperationState
from ledger.services import request_slots, slots_view
from recovery.ownership import item_owner

pytestmark = pytest.mark.slow

REASON = "slots needed to review the enquiry"


def next_working_day(now=None):
    return appointments.working_days(now or timezone.now(), 2)[1]


def local(day, hour):
    return timezone.make_aware(datetime.combine(day, time(hour)))


def read_now(enquiry, reviewer, run_queue, *, until=(OperationState.CONFIRMED,)):
    op, how = request_slots(enquiry.pk, actor=reviewer, reason=REASON)
    assert how == "requested"

    def done():
        op.refresh_from_db()
        return op.state in until

    run_queue(until=done)
    return op


@pytest.fixture
def row(radicale, point_appointments):
    return point_appointments(radicale)


def test_a_read_stores_busy_time_free_slots_as_of_and_the_calendars_version(
    radicale, row, visit_enquiry, reviewer, run_queue
):
    day = next_working_day()
    radicale.add_busy(local(day, 10), local(day, 12))
    radicale.add_busy(local(day, 14), local(day, 15), TRANSP="TRANSPARENT")  # takes no time
    radicale.add_busy(local(day, 15), local(day, 16), STATUS="CANCELLED")  # neither
    before = timezone.now()
    op = read_now(visit_enquiry(), reviewer, run_queue)

    result = op.result
    assert appointments.from_text(result["busy"]) == [(local(day, 10), local(day, 12))]
    slots = [s for s in appointments.from_text(result["slots"]) if s[0].date() == day]
    starts = [s[0].hour for s in slots]
    assert starts == [9, 12, 13, 14, 15, 16]  # 10 and 11 are busy; 14 and 15 are free
    assert before <= datetime.fromisoformat(result["as_of"]) <= op.state_changed_at
    assert result["max_age_seconds"] == 300.0
    assert result["version"]["ctag"] == radicale.ctag()
    assert result["version"]["events"] == 3
    assert list(op.attempts.values_list("kind", "outcome")) == [("call", "success")]
    # A read changes nothing at the server.
    assert radicale.event_count() == 3


def test_a_fresh_read_is_not_read_again_and_a_stale_one_is(
    radicale, row, visit_enquiry, reviewer, run_queue
):
    enquiry = visit_enquiry()
    first = read_now(enquiry, reviewer, run_queue)
    again, how = request_slots(enquiry.pk, actor=reviewer, reason=REASON)
    assert (again, how) == (first, "fresh")
    assert Operation.objects.filter(enquiry=enquiry, action="appointments.read").count() == 1
    assert slots_view(enquiry).state == "fresh"

    with time_machine.travel(timezone.now() + timedelta(seconds=301), tick=True):
        view = slots_view(enquiry)
        assert view.state == "stale" and view.asks_for_read
        assert view.age_seconds > view.max_age_seconds
        second = read_now(enquiry, reviewer, run_queue)
        assert slots_view(enquiry).state == "fresh"
    assert second.pk != first.pk
    assert second.idempotency_key.endswith(":appointments.read:read2:r1")


def test_the_calendar_changed_between_two_reads(radicale, row, visit_enquiry, reviewer, run_queue):
    enquiry = visit_enquiry()
    day = next_working_day()
    first = read_now(enquiry, reviewer, run_queue)
    ctag_before = radicale.ctag()
    assert (local(day, 11), local(day, 12)) in appointments.from_text(first.result["slots"])

    uid = radicale.add_busy(local(day, 11), local(day, 12))  # someone books 11:00 meanwhile
    with time_machine.travel(timezone.now() + timedelta(seconds=301), tick=True):
        second = read_now(enquiry, reviewer, run_queue)
        view = slots_view(enquiry)

    assert radicale.uids() == [uid] and radicale.ctag() != ctag_before
    assert first.result["version"]["ctag"] == ctag_before
    assert second.result["version"]["ctag"] == radicale.ctag()
    assert second.result["version"]["etags"] != first.result["version"]["etags"]
    assert (local(day, 11), local(day, 12)) not in appointments.from_text(second.result["slots"])
    assert view.changed and view.read == second


def test_slow_within_the_timeout_is_a_read(
    radicale, calendar_proxy, point_appointments, visit_enquiry, reviewer, run_queue
):
    point_appointments(radicale, via=calendar_proxy, timeout_seconds=5.0)
    calendar_proxy.fault("appointments.events", "latency", delay_ms=300)
    op = read_now(visit_enquiry(), reviewer, run_queue)
    stats = calendar_proxy.stats()["targets"]
    assert stats["appointments.events"]["faulted"] == {"latency": 1}
    assert stats["appointments.events"]["forwarded"] == 1
    assert list(op.attempts.values_list("outcome", flat=True)) == ["success"]


def test_slower_than_the_timeout_is_read_again_within_the_budget(
    radicale, calendar_proxy, point_appointments, visit_enquiry, reviewer, run_queue
):
    point_appointments(radicale, via=calendar_proxy, timeout_seconds=1.0)
    calendar_proxy.fault("appointments.events", "hold", delay_ms=3000)
    op = read_now(visit_enquiry(), reviewer, run_queue)
    outcomes = list(op.attempts.order_by("number").values_list("kind", "outcome"))
    assert outcomes == [("call", "uncertain"), ("lookup", "repeatable"), ("call", "success")]
    assert calendar_proxy.stats()["targets"]["appointments.events"]["seen"] == 2
    assert op.budget_used == 2


def test_unavailable_is_bounded_then_failed_with_an_owner_and_the_old_read_stale(
    radicale, calendar_proxy, point_appointments, visit_enquiry, reviewer, run_queue, make_user
):
    owner = make_user("admin", username="calendar-owner")
    point_appointments(radicale, via=calendar_proxy, owner=owner, retry_budget=3)
    enquiry = visit_enquiry()
    first = read_now(enquiry, reviewer, run_queue)
    calendar_proxy.reset()
    calendar_proxy.fault("appointments.version", "error_503", count=10)
    later = timezone.now() + timedelta(seconds=301)
    with time_machine.travel(later, tick=True):
        failed = read_now(enquiry, reviewer, run_queue, until=(OperationState.FAILED,))
        view = slots_view(enquiry)

    assert failed.attention == "retry_budget_exhausted" and failed.owner is None
    assert owner in item_owner(failed).people()  # its queue has no owner: the admins have it
    assert failed.attempts.filter(kind="call").count() == 3
    stats = calendar_proxy.stats()["targets"]
    assert stats["appointments.version"]["faulted"] == {"error_503": 3}
    assert stats["appointments.events"]["seen"] == 0  # nothing past the first request
    # Shown as it is: a failure with its owner, and the last read that worked, stale.
    assert view.state == "failed" and view.latest == failed and view.read == first
    assert view.age_seconds > view.max_age_seconds
    assert not view.asks_for_read  # a person decides; the page does not loop on it

    # The calendar is back: the next read answers, and the failed one leaves the queue.
    calendar_proxy.clear_faults()
    with time_machine.travel(later + timedelta(seconds=5), tick=True):
        answered = read_now(enquiry, reviewer, run_queue)
        assert slots_view(enquiry).state == "fresh"
    failed.refresh_from_db()
    assert answered.state == OperationState.CONFIRMED and failed.state == OperationState.CANCELLED


def test_refused_credentials_fail_at_once_and_tell_the_owner(
    radicale, point_appointments, visit_enquiry, reviewer, run_queue
):
    point_appointments(radicale, token="handover:wrong-password")
    op = read_now(visit_enquiry(), reviewer, run_queue, until=(OperationState.FAILED,))
    assert op.attention == "auth" and op.last_error_status == 401
    assert op.attempts.count() == 1


def test_check_says_what_is_wrong_in_plain_words(radicale, point_appointments):
    row = point_appointments(radicale)
    kind = KINDS["caldav"]
    assert kind.check(row) == []
    row.token = "handover:wrong"
    assert "refused Handover's credentials" in kind.check(row)[0]
    row.token, row.base_url = radicale.credentials, radicale.url + "/"
    assert "is not a calendar collection" in kind.check(row)[0]
    row.base_url = radicale.url + "/handover/no-such-calendar/"
    assert kind.check(row)  # 404: says so, never "ready"
    assert Integration.objects.get(name="appointments").base_url == radicale.calendar_url


def test_a_recurring_event_takes_each_of_its_occurrences(
    radicale, row, visit_enquiry, reviewer, run_queue
):
    days = appointments.working_days(timezone.now(), 3)
    radicale.add_busy(local(days[1], 13), local(days[1], 14), RRULE="FREQ=DAILY;COUNT=2")
    op = read_now(visit_enquiry(), reviewer, run_queue)
    expected = [(local(days[1], 13), local(days[1], 14))]
    second = days[1] + timedelta(days=1)
    expected.append((local(second, 13), local(second, 14)))
    assert appointments.from_text(op.result["busy"]) == expected
    assert radicale.event_count() == 1  # one event at the server, two busy hours


def test_an_event_every_minute_is_read_with_a_bounded_number_of_occurrences(
    radicale, row, visit_enquiry, reviewer, run_queue, settings
):
    """One event, every minute from the window's start: thousands of occurrences in the
    window. The read stops at the first occurrence past CALENDAR_MAX_OCCURRENCES (50 here):
    too large to read, invalid, one attempt, not retried; the server still holds one event."""
    settings.CALENDAR_MAX_OCCURRENCES = 50
    start, _end = appointments.window(timezone.now())
    radicale.add_busy(start, start + timedelta(minutes=1), RRULE="FREQ=MINUTELY")
    op = read_now(visit_enquiry(), reviewer, run_queue, until=(OperationState.FAILED,))
    assert (op.attention, op.last_error_class) == ("invalid", "invalid")
    assert "too large to read: more than 50 busy times in the window" in op.last_error_message
    assert list(op.attempts.values_list("outcome", flat=True)) == ["invalid"]
    assert radicale.event_count() == 1
