"""The drill's e-mail cases: the notification integration speaking SMTP (kind ``smtp``) to a real
relay (harness.mailserver, its own process) with the relay's own faults. Each counts the
messages the relay received by Message-ID AND reads the ledger."""

from __future__ import annotations

import contextlib
import time

from harness.drill.cases.steps import CLEANUP, CLEANUP_FOR_RESIDENT
from harness.drill.results import CaseFailed, CaseResult
from harness.drill.runner import ACTOR, Drill
from harness.mailserver import MailServer
from intake.models import Enquiry, EnquiryState
from intake.services import reject_enquiry
from ledger import notices
from ledger.kinds import SMTP
from ledger.models import Action, Integration, JournalEntry, Operation, OperationState
from ledger.services import cancel_operation, complete_by_hand
from recovery.ownership import item_owner


@contextlib.contextmanager
def mail_relay(d: Drill):
    """The notification integration pointed at a fresh relay (its owner, told of refused
    credentials: the drill's reviewer) for one case; put back as it was (the drill's sandbox)
    afterwards."""
    row = Integration.objects.get(name=Integration.NOTIFY)
    before = {"kind": row.kind, "base_url": row.base_url, "owner_id": row.owner_id}
    with MailServer(d.dir / "mail" / "messages", log_path=d.dir / "mail.log") as relay:
        relay.reset()
        Integration.objects.filter(pk=row.pk).update(
            kind=SMTP, base_url=relay.url, owner=d.reviewer, supports_lookup=False
        )
        try:
            yield relay
        finally:
            Integration.objects.filter(pk=row.pk).update(supports_lookup=True, **before)


def _acknowledgement(d: Drill, case: CaseResult):
    enquiry = d.send(case)
    d.wait_enquiry(enquiry, EnquiryState.READY_FOR_REVIEW)
    notify = d.operation(enquiry, Action.SEND_NOTICE)
    if notify is None:
        raise CaseFailed("no acknowledgement was proposed")
    return enquiry, notify


def _owner(op):
    """Who has the item now, in words: its queue's owner by the response policy, or the admins
    where the queue has none, said so (recovery.ownership); None only for an item in no queue."""
    owner = item_owner(op)
    return owner.label if owner.user is not None or owner.to_admins else None


def email_no_reply(d: Drill, case: CaseResult):
    with mail_relay(d) as relay:
        relay.fault("drop_after_data")
        enquiry, notify = _acknowledgement(d, case)
        d.wait_operation(
            notify,
            lambda o: o.state != OperationState.APPROVED and o.state != OperationState.SUBMITTED,
            "the acknowledgement's outcome",
        )
        message_id = notices.message_id(notify.idempotency_key)
        received = relay.count(message_id)
        owner = _owner(notify)
        queue = d.queue_row("operation", notify.pk)
        case.destination_records = received
        case.note(
            f"acknowledgement {notify.state} ({notify.attention}); relay received {received} "
            f"message(s) with {message_id}; owner {owner}; queue: {queue}"
        )
        case.check(received == 1, "exactly one message at the relay", received)
        case.check(notify.state == OperationState.UNKNOWN, "an unknown operation", notify.state)
        case.check(
            notify.attention == "smtp_no_reply",
            "waiting for a person, not resent",
            notify.attention,
        )
        case.check(owner is not None, "an item with an owner", owner)
        case.check(queue == "unknown", "visible in the queue", queue)
        complete_by_hand(notify.pk, actor=ACTOR, reason=CLEANUP, external_id=message_id)
        case.check(relay.count(message_id) == 1, "still one message", relay.count(message_id))
    reject_enquiry(
        enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
    )


def email_refused(d: Drill, case: CaseResult):
    with mail_relay(d) as relay:
        relay.fault("550", count=5)
        enquiry, notify = _acknowledgement(d, case)
        d.wait_operation(
            notify, lambda o: o.state == OperationState.FAILED, "the acknowledgement to fail"
        )
        received = relay.stats()["received"]
        queue = d.queue_row("operation", notify.pk)
        case.destination_records = received
        case.note(
            f"acknowledgement {notify.state} ({notify.attention}, {notify.last_error_status}): "
            f"{notify.last_error_message[:120]}; relay received {received}; queue: {queue}"
        )
        case.check(notify.attention == "invalid", "refused as invalid, not retried")
        case.check("User unknown" in notify.last_error_message, "the relay's own words kept")
        case.check(notify.attempts.count() == 1, "one attempt", notify.attempts.count())
        case.check(received == 0, "no message at the relay", received)
        case.check(queue == "failed", "visible in the queue", queue)
        cancel_operation(notify.pk, actor=ACTOR, reason=CLEANUP)
    reject_enquiry(
        enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
    )


def email_busy(d: Drill, case: CaseResult):
    with mail_relay(d) as relay:
        relay.fault("421")
        enquiry, notify = _acknowledgement(d, case)
        d.wait_operation(
            notify, lambda o: o.state == OperationState.CONFIRMED, "the acknowledgement"
        )
        message_id = notices.message_id(notify.idempotency_key)
        received = relay.count(message_id)
        calls = notify.attempts.filter(kind="call").count()
        case.destination_records = received
        case.note(
            f"acknowledgement {notify.state} after {calls} calls (relay queue id "
            f"{notify.external_id}); relay received {received} with {message_id}"
        )
        case.check(calls == 2, "a 421 retried once", calls)
        case.check(received == 1, "exactly one message at the relay", received)
    reject_enquiry(
        enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
    )


OUTAGE_MESSAGES = 10
OUTAGE_SECONDS = 10.0


def email_outage(d: Drill, case: CaseResult):
    """The relay down (connection refused) while messages are due, then back: e-mail's retry
    window (shrunk to the drill's scale: EMAIL_RETRY_FIRST_SECONDS=1, at most 2 s) sends each
    once, with nobody involved."""
    with mail_relay(d) as relay:
        relay.fault("refuse")
        sent = []
        for number in range(OUTAGE_MESSAGES):
            body = d.body(d.payload(case.key, email=f"drill{number}@example.org"))
            status, answer = d.post(f"{case.input_reference}-{number}", body)
            if status != 202:
                raise CaseFailed(f"the intake endpoint answered {status}: {answer}")
            sent.append(Enquiry.objects.get(reference=answer["reference"]))
        case.enquiry_reference = ", ".join(e.reference for e in sent)
        notes = []
        for enquiry in sent:
            d.wait_enquiry(enquiry, EnquiryState.READY_FOR_REVIEW)
            notes.append(d.operation(enquiry, Action.SEND_NOTICE))
        if None in notes:
            raise CaseFailed("an acknowledgement was not proposed")
        for note in notes:
            d.wait_operation(
                note,
                lambda o: o.state == OperationState.APPROVED and o.last_error_class == "transient",
                "the acknowledgement refused and waiting for its next try",
            )
        time.sleep(OUTAGE_SECONDS)
        waiting = sum(
            1
            for note in notes
            if Operation.objects.get(pk=note.pk).state == OperationState.APPROVED
        )
        relay.clear_faults()
        for note in notes:
            d.wait_operation(
                note,
                lambda o: o.state not in (OperationState.APPROVED, OperationState.SUBMITTED),
                "the acknowledgement once the relay is back",
            )
        counts = [relay.count(notices.message_id(note.idempotency_key)) for note in notes]
        calls = sum(note.attempts.filter(kind="call").count() for note in notes)
        people = JournalEntry.objects.filter(
            subject_id__in=[str(note.pk) for note in notes]
        ).exclude(actor__startswith="system:")
        case.destination_records = sum(counts)
        case.note(
            f"{OUTAGE_MESSAGES} acknowledgements, relay refusing for {OUTAGE_SECONDS:g} s: "
            f"{waiting} still waiting when it came back; then "
            f"{sum(n.state == OperationState.CONFIRMED for n in notes)} confirmed after {calls} "
            f"calls; relay received {sum(counts)} (per Message-ID {sorted(set(counts))}); "
            f"{people.count()} journal rows by a person"
        )
        case.check(waiting == OUTAGE_MESSAGES, "every message waiting, none failed", waiting)
        case.check(
            all(n.state == OperationState.CONFIRMED for n in notes),
            "every message sent once the relay is back",
        )
        case.check(counts == [1] * OUTAGE_MESSAGES, "exactly one message each", counts)
        case.check(people.count() == 0, "nobody involved", people.count())
    for enquiry in sent:
        reject_enquiry(
            enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
        )
