"""The drill's cases about what arrives at intake: a valid event, the same event again (and 50
times at once), invalid fields, a message no category fits."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import requests

from harness.drill.cases.steps import (
    CLEANUP,
    CLEANUP_FOR_RESIDENT,
    deliver_to_crm,
    ready_for_review,
)
from harness.drill.results import CaseResult
from harness.drill.runner import Drill
from intake.models import Enquiry, EnquiryState, IntakeEvent, Suggestion
from intake.services import reject_enquiry

CONCURRENT_COPIES = 50


def valid_new_event(d: Drill, case: CaseResult):
    enquiry = ready_for_review(d, case)
    op = deliver_to_crm(d, case, enquiry)
    count = d.records(case, enquiry)
    case.note(f"enquiry {enquiry.state}, CRM operation {op.state} ({op.external_id})")
    case.check(IntakeEvent.objects.filter(enquiry=enquiry).count() == 1, "one intake event")
    case.check(op.external_id, "the CRM's record ID saved")
    case.check(count == 1, "one destination record", f"{count} records")


def duplicate_deliveries(d: Drill, case: CaseResult):
    body = d.body(d.payload(case.key))
    first = d.post(case.input_reference, body)
    second = d.post(case.input_reference, body)
    case.note(f"twice: {first[0]} then {second[0]}")
    case.check(first[0] == 202, "first delivery accepted (202)", first[0])
    case.check(
        second[0] == 200 and second[1].get("reference") == first[1].get("reference"),
        "second delivery answered with the existing result (200, same reference)",
        second,
    )

    burst_id = case.input_reference + "-x50"
    burst_body = d.body(d.payload(case.key + "-x50"))
    barrier = threading.Barrier(CONCURRENT_COPIES, timeout=30)

    def deliver(_):
        with requests.Session() as session:
            session.trust_env = False
            barrier.wait()
            return d.post(burst_id, burst_body, session=session)

    with ThreadPoolExecutor(max_workers=CONCURRENT_COPIES) as pool:
        answers = list(pool.map(deliver, range(CONCURRENT_COPIES)))
    statuses = sorted(status for status, _ in answers)
    references = {answer.get("reference") for _, answer in answers}
    case.note(
        f"{CONCURRENT_COPIES} at once: {statuses.count(202)}x202, {statuses.count(200)}x200, "
        f"other {[s for s in statuses if s not in (200, 202)]}"
    )
    case.check(statuses.count(202) == 1, "exactly one of the 50 accepted as new", statuses)
    case.check(set(statuses) <= {200, 202}, "every copy answered 200 or 202", statuses)
    case.check(len(references) == 1, "every copy names the same enquiry", references)

    enquiries = []
    for event_id in (case.input_reference, burst_id):
        events = IntakeEvent.objects.filter(source="drill", event_id=event_id)
        case.check(events.count() == 1, f"one stored event for {event_id}", events.count())
        enquiries.append(events.first().enquiry)
    burst_event = IntakeEvent.objects.get(source="drill", event_id=burst_id)
    case.check(
        burst_event.deliveries == CONCURRENT_COPIES,
        "all 50 deliveries counted on the one event",
        burst_event.deliveries,
    )
    case.enquiry_reference = ", ".join(e.reference for e in enquiries)

    for enquiry in enquiries:
        d.wait_enquiry(enquiry, EnquiryState.READY_FOR_REVIEW)
        d.settle(enquiry)
        d.approve(enquiry)
    for enquiry in enquiries:
        d.wait_enquiry(enquiry, EnquiryState.CONFIRMED)
    # Delivered again after the write: the stored answer, and still no second record.
    again = d.post(case.input_reference, body)
    d.settle(enquiries[0])
    counts = [d.destination.records(e.reference) for e in enquiries]
    case.destination_records = sum(counts)
    case.note(f"both confirmed; records per enquiry {counts}; re-delivery after: {again[0]}")
    case.check(again[0] == 200, "a delivery after the write is answered 200", again[0])
    case.check(counts == [1, 1], "one destination record per event", counts)


def invalid_fields(d: Drill, case: CaseResult):
    payload = d.payload(case.key, email="not-an-address", consent=False)
    status, answer = d.post(case.input_reference, d.body(payload))
    errors = answer.get("errors", {})
    case.note(f"intake {status}, errors for {sorted(errors)}")
    case.check(status == 422, "422", status)
    case.check(
        {"email", "consent"} <= set(errors) and all(errors[k] for k in ("email", "consent")),
        "field-level messages for email and consent",
        errors,
    )
    stored = d.stored_event(case.input_reference)
    drill_enquiries = Enquiry.objects.filter(source="drill", subject__contains=case.key).count()
    case.check(stored is None, "no event stored")
    case.check(drill_enquiries == 0, "no enquiry stored", drill_enquiries)
    case.destination_records = 0
    case.note("nothing stored")


def uncertain_classification(d: Drill, case: CaseResult):
    enquiry = ready_for_review(
        d, case, message="Zqxv wuplo frint; drill text that names no service at all."
    )
    suggestion = Suggestion.objects.filter(enquiry=enquiry).order_by("-created_at").first()
    queue = d.queue_row("enquiry", enquiry.reference)
    case.destination_records = d.destination.records(enquiry.reference)
    case.note(
        f"suggestion {suggestion.label if suggestion else 'none'} "
        f"({suggestion.validation if suggestion else '-'}); enquiry {enquiry.state}, "
        f"category {enquiry.category or 'none'}; queue: {queue}"
    )
    case.check(suggestion is not None and suggestion.unresolved, "classified unresolved")
    case.check(enquiry.category_id is None, "no category guessed")
    case.check(queue == "unresolved_classification", "in the review queue", queue)
    case.check(case.destination_records == 0, "nothing written", case.destination_records)
    reject_enquiry(
        enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
    )
