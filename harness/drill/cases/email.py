"""The drill's e-mail cases: the notification integration speaking SMTP (kind ``smtp``) to a real
relay (harness.mailserver, its own process) with the relay's own faults. Each counts the
messages the relay received by Message-ID AND reads the ledger."""

from __future__ import annotations

import contextlib

from harness.drill.cases.steps import CLEANUP, CLEANUP_FOR_RESIDENT
from harness.drill.results import CaseFailed, CaseResult
from harness.drill.runner import ACTOR, Drill
from harness.mailserver import MailServer
from intake.models import EnquiryState
from intake.services import reject_enquiry
from ledger import notices
from ledger.kinds import SMTP
from ledger.models import Action, Integration, OperationState
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
