"""The drill's appointment cases, against a real CalDAV server (Radicale) through the fault
proxy: slow, unavailable, stale, and the calendar changed between two reads. Each checks the
ledger (the reads, their attempts, what the review page would show) and what the server holds."""

from __future__ import annotations

from harness.drill.calendar import MAX_AGE_SECONDS
from harness.drill.cases.steps import CLEANUP, CLEANUP_FOR_RESIDENT, ready_for_review
from harness.drill.results import CaseFailed, CaseResult
from harness.drill.runner import ACTOR, Drill
from intake.services import reject_enquiry, revise_enquiry
from ledger import appointments
from ledger.models import Integration, OperationState
from ledger.services import cancel_operation, request_slots, slots_view

ASK = "drill: slots needed to review the enquiry"


def needing_a_visit(d: Drill, case: CaseResult):
    """An enquiry at review whose category (set by a reviewer) needs a visit; the calendar's
    proxy counts from here."""
    d.calendar.proxy.reset()
    enquiry = ready_for_review(d, case)
    revise_enquiry(
        enquiry.pk,
        actor=d.editor,
        reason="drill: the resident needs a home visit",
        fields={},
        category=d.calendar.visit_category(),
    )
    enquiry.refresh_from_db()
    return enquiry


def read(d: Drill, enquiry, *, until=(OperationState.CONFIRMED,), what="the read to be confirmed"):
    op, how = request_slots(enquiry.pk, actor=d.reviewer, reason=ASK)
    if how != "requested":
        raise CaseFailed(f"asking for slots gave {how!r}, not a new read")
    return d.wait_operation(op, lambda o: o.state in until, what)


def wait_stale(d: Drill, enquiry):
    return d.wait(
        lambda: slots_view(enquiry).state == "stale",
        f"the read to pass its maximum age ({MAX_AGE_SECONDS:g}s)",
    )


def finish(d: Drill, enquiry):
    reject_enquiry(
        enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
    )


def appointments_slow(d: Drill, case: CaseResult):
    calendar = d.calendar
    held_before = calendar.records()
    enquiry = needing_a_visit(d, case)
    # The events query is held past the integration's timeout once: no answer for that call.
    calendar.proxy.fault("appointments.events", "hold", delay_ms=5000)
    op = read(d, enquiry)
    outcomes = list(op.attempts.order_by("number").values_list("kind", "outcome"))
    stats = calendar.proxy.stats()["targets"]["appointments.events"]
    view = slots_view(enquiry)
    case.destination_records = calendar.records()
    case.note(
        f"read {op.state}, attempts {outcomes}; events query seen {stats['seen']} time(s) "
        f"({stats['faulted']}); as of {op.result.get('as_of')}; card {view.state}"
    )
    case.check(
        outcomes == [("call", "uncertain"), ("lookup", "repeatable"), ("call", "success")],
        "no answer in time: read again (a read needs no look-up), within the budget",
        outcomes,
    )
    case.check(op.budget_used <= op.integration.retry_budget, "bounded", op.budget_used)
    case.check(bool(op.result.get("as_of")), "the answer carries when it was true")
    case.check(view.state == "fresh" and view.read == op, "the review page shows it as current")
    case.check(case.destination_records == held_before, "the calendar is unchanged by reads")
    finish(d, enquiry)


def appointments_unavailable(d: Drill, case: CaseResult):
    calendar = d.calendar
    held_before = calendar.records()
    enquiry = needing_a_visit(d, case)
    budget = Integration.objects.get(name=Integration.APPOINTMENTS).retry_budget
    calendar.proxy.fault("appointments.version", "error_503", count=budget + 5)
    op = read(d, enquiry, until=(OperationState.FAILED,), what="the read to fail")
    calendar.proxy.clear_faults()
    calls = op.attempts.filter(kind="call").count()
    stats = calendar.proxy.stats()["targets"]
    queue = d.queue_row("operation", op.pk)
    view = slots_view(enquiry)
    case.destination_records = calendar.records()
    case.note(
        f"read {op.state} ({op.attention}) after {calls} call(s); proxy: PROPFIND faulted "
        f"{stats['appointments.version']['faulted']}, REPORT seen "
        f"{stats['appointments.events']['seen']}; queue: {queue}; owner: "
        f"{op.owner or 'the queue policy'}; card {view.state}"
    )
    case.check(calls == budget, f"bounded retries ({budget} calls)", calls)
    case.check(
        stats["appointments.version"]["faulted"] == {"error_503": budget},
        "each call reached the calendar's address and was refused there",
        stats["appointments.version"]["faulted"],
    )
    case.check(op.attention == "retry_budget_exhausted", "marked retry budget exhausted")
    case.check(queue == "failed", "visible in the queue", queue)
    case.check(view.state == "failed" and view.read is None, "the page says it could not read")
    case.check(not view.asks_for_read, "the page does not ask again by itself")
    case.check(case.destination_records == held_before, "the calendar is unchanged", held_before)
    cancel_operation(op.pk, actor=ACTOR, reason=CLEANUP)
    finish(d, enquiry)


def appointments_stale(d: Drill, case: CaseResult):
    calendar = d.calendar
    enquiry = needing_a_visit(d, case)
    first = read(d, enquiry)
    wait_stale(d, enquiry)
    stale = slots_view(enquiry)
    # The re-read cannot be made: the calendar answers 503 to every request.
    calendar.proxy.fault("appointments.version", "error_503", count=20)
    failed = read(d, enquiry, until=(OperationState.FAILED,), what="the re-read to fail")
    view = slots_view(enquiry)
    case.note(
        f"first read as of {first.result.get('as_of')}; stale after {stale.age_seconds:.0f}s "
        f"(max {stale.max_age_seconds:g}s); re-read {failed.state} ({failed.attention}); "
        f"card {view.state}, showing the read of {view.as_of} ({view.age_seconds:.0f}s old)"
    )
    case.check(stale.state == "stale" and stale.asks_for_read, "stale: the page asks for a read")
    case.check(failed.attention == "retry_budget_exhausted", "the re-read failed, bounded")
    case.check(
        view.state == "failed" and view.read == first and view.age_seconds > view.max_age_seconds,
        "shown as stale with its age, never as current",
        view.state,
    )
    calendar.proxy.clear_faults()
    again = read(d, enquiry, what="a read once the calendar is back")
    failed.refresh_from_db()
    view = slots_view(enquiry)
    case.destination_records = calendar.records()
    case.note(f"calendar back: read {again.state}, failed read {failed.state}, card {view.state}")
    case.check(view.state == "fresh" and view.read == again, "re-read, and current again")
    case.check(
        failed.state == OperationState.CANCELLED, "the failed read left the queue (answered later)"
    )
    finish(d, enquiry)


def appointments_changed(d: Drill, case: CaseResult):
    calendar = d.calendar
    enquiry = needing_a_visit(d, case)
    first = read(d, enquiry)
    free = appointments.from_text(first.result.get("slots"))
    if not free:
        raise CaseFailed("the first read found no free slot to take")
    taken = free[0]
    held_before = calendar.records()
    uid = calendar.server.add_busy(*taken)  # someone books the first free slot meanwhile
    wait_stale(d, enquiry)
    second = read(d, enquiry, what="the second read")
    view = slots_view(enquiry)
    case.destination_records = calendar.records()
    after = appointments.from_text(second.result.get("slots"))
    case.note(
        f"took {taken[0]:%a %H:%M} at the server (event {uid[:8]}); version "
        f"{first.result['version'].get('ctag')} -> {second.result['version'].get('ctag')}; "
        f"free slots {len(free)} -> {len(after)}; {held_before} -> "
        f"{case.destination_records} event(s) held"
    )
    case.check(case.destination_records == held_before + 1, "the server holds the new event")
    case.check(first.result["version"] != second.result["version"], "a new version (ctag, ETags)")
    case.check(taken not in after, "the taken slot is no longer offered")
    case.check(view.changed and view.read == second, "the page says the calendar changed")
    calendar.server.remove(uid)
    finish(d, enquiry)
