"""Delivery reports: what a provider says about a message after it accepted it.

A relay's 250 means *accepted*, not *delivered*. Where the provider reports delivery afterwards,
the report is taken in here, matched to its notify.send operation by the Message-ID Handover
gave the message (ledger.notices.message_id):

- bounced, rejected or failed: an accepted (``confirmed``) message becomes ``failed`` with
  *not delivered* (``delivery_failed``), in the queue (owned by its queue's owner); an
  ``unknown`` one (its relay never replied) becomes ``failed`` the same way: it did not arrive.
- delivered: kept on the operation (``result.delivery``); an ``unknown`` one is ``confirmed``,
  since its arrival is the proof no look-up could give.
- anything else (queued, deferred, opened...): journalled, nothing changes.

Reports come through django-anymail's normalised tracking webhooks (its ``tracking`` signal;
ledger.views.mailgun_tracking is the endpoint), so another provider anymail supports is a URL
and a setting away. A report about no message of ours is ignored (logged).
"""

from __future__ import annotations

import logging

from django.db import transaction

from intake.workflow import system_actor
from ledger import journal
from ledger.execution import lock_operation
from ledger.models import Action, Operation, OperationState

logger = logging.getLogger("ledger.delivery")

ACTOR = system_actor("delivery-report")
NOT_DELIVERED = {"bounced", "rejected", "failed"}
DELIVERED = "delivered"


def sent_with(message_id):
    """Where the e-mail operation that sent this Message-ID is found, in order: its result
    names it once the relay answered; before that (the relay never replied) only its attempt's
    request does. Each reads an index (operation_message_id, attempt_message_id), not every
    message ever sent."""
    return (
        Operation.objects.filter(action=Action.SEND_NOTICE, result__message_id=message_id),
        Operation.objects.filter(
            action=Action.SEND_NOTICE, attempts__request_summary__message_id=message_id
        ),
    )


def record_report(*, message_id, event, provider, description="", mta_response="", event_id=""):
    """Apply one delivery report; returns what happened, in a word (for the log and tests)."""
    if not message_id:
        return "no message id"
    found = None
    for sent in sent_with(message_id):
        found = sent.values_list("pk", flat=True).first()
        if found is not None:
            break
    if found is None:
        logger.info("delivery report %s for a message that is not ours", event)
        return "not ours"
    said = (description or mta_response or "")[:500]
    evidence = {
        "provider": provider,
        "event": event,
        "event_id": str(event_id or "")[:100],
        "description": (description or "")[:500],
        "mta_response": (mta_response or "")[:500],
        "message_id": message_id,
    }
    with transaction.atomic(), journal.deferred():
        _enquiry, op = lock_operation(found)
        if event in NOT_DELIVERED and op.state in (
            OperationState.CONFIRMED,
            OperationState.UNKNOWN,
        ):
            reason = f"{provider} reports the message {event}: {said}".strip(": ")
            op.result = {**op.result, "delivery": "failed", "delivery_report": evidence}
            op.next_attempt_at = None
            if op.state == OperationState.CONFIRMED:
                op.bounce(actor=ACTOR, reason=reason[:1000], evidence=evidence)
            else:
                op.attention = "delivery_failed"
                op.fail(actor=ACTOR, reason=reason[:1000], evidence=evidence)
            op.save()
            return "failed to deliver"
        if event == DELIVERED and op.state in (OperationState.CONFIRMED, OperationState.UNKNOWN):
            op.result = {**op.result, "delivery": "delivered", "delivery_report": evidence}
            if op.state == OperationState.UNKNOWN:
                op.external_id = op.external_id or message_id
                op.confirm(
                    actor=ACTOR, reason=f"{provider} reports it delivered", evidence=evidence
                )
                op.save()
                return "confirmed by delivery"
            op.save(update_fields=["result", "updated_at"])
        journal.record(
            op,
            "ledger.operation.delivery_report",
            actor=ACTOR,
            reason=f"{provider}: {event}",
            evidence=evidence,
            from_state=op.state,
            to_state=op.state,
        )
    return "noted"
