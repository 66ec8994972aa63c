"""The ledger listening to intake (intake never imports the ledger).

Each receiver runs inside intake's transaction, so the operations it records commit or roll
back with the change that caused them.
"""

import logging

from django.dispatch import receiver
from django_fsm.signals import post_transition
from django_q.signals import post_spawn

from intake import signals
from intake.models import Enquiry

logger = logging.getLogger("ledger.receivers")


@receiver(signals.enquiry_received, dispatch_uid="ledger.enquiry_received")
def enquiry_received(sender, enquiry, **kwargs):
    from ledger.queueing import enqueue_receipt

    # Sent inside intake's transaction: a worker takes the receipt's work up (ledger.receipt).
    enqueue_receipt(enquiry)


@receiver(signals.revision_created, dispatch_uid="ledger.revision_created")
def revision_created(sender, enquiry, revision, **kwargs):
    from ledger.services import supersede_revision

    supersede_revision(enquiry, revision)


@receiver(signals.event_redelivered, dispatch_uid="ledger.event_redelivered")
def event_redelivered(sender, enquiry, **kwargs):
    from ledger.services import nudge_enquiry

    nudge_enquiry(enquiry)


@receiver(signals.enquiry_action, dispatch_uid="ledger.enquiry_action")
def enquiry_action(sender, enquiry, action, actor, reason="", evidence=None, **kwargs):
    from ledger import journal

    journal.record(enquiry, action, actor=actor, reason=reason, evidence=evidence or {})


@receiver(signals.answer_waiting, dispatch_uid="ledger.answer_waiting")
def answer_waiting(sender, answer, action, actor, reason="", evidence=None, **kwargs):
    from ledger import journal

    journal.record(answer, action, actor=actor, reason=reason, evidence=evidence or {})


@receiver(signals.resident_link_requested, dispatch_uid="ledger.resident_link_requested")
def resident_link_requested(sender, enquiry, link, actor, **kwargs):
    from ledger.proposals import propose_new_link

    # Proposed by the ledger (the resident's request is journalled on the enquiry by intake).
    propose_new_link(enquiry, link=link)


# The resident-visible transitions and the message each owes the resident (ledger.wording).
TELLS_RESIDENT = {
    "request_information": "needs_information",
    "confirm": "passed_on",
    "reject": "not_taken_forward",
    "withdraw": "closed",
}


@receiver(post_transition, sender=Enquiry, dispatch_uid="ledger.tell_resident")
def tell_resident(sender, instance, name, method_kwargs, **kwargs):
    """A transition the resident should hear about: its message is proposed in the same
    transaction (a failed message never undoes the transition). The words for the resident
    come from the transition's evidence (``resident_message``), never from its reason, which
    stays in the journal."""
    kind = TELLS_RESIDENT.get(name)
    if kind is None or "exception" in kwargs:
        return
    from ledger.services import propose_information_request, propose_resident_message

    evidence = method_kwargs.get("evidence") or {}
    message = str(evidence.get("resident_message") or "")
    if name == "request_information":
        # Approved by policy, as the acknowledgement is: the ledger proposes it, not the reviewer.
        propose_information_request(instance, message_to_resident=message)
        return
    if name == "confirm":
        revision = instance.approved_revision or instance.current_revision
        propose_resident_message(
            instance,
            kind,
            revision=revision,
            destination_reference=str(evidence.get("external_id") or ""),
        )
        return
    propose_resident_message(
        instance, kind, revision=instance.current_revision, message_to_resident=message
    )


@receiver(post_spawn, dispatch_uid="ledger.sweep_on_worker_start")
def sweep_on_worker_start(sender, proc_name, **kwargs):
    """A worker (re)starts: what an earlier crash left in flight is found now, not in a minute."""
    from ledger.sweeper import sweep

    try:
        report = sweep()
        logger.info("worker start sweep (%s): %s", proc_name, report.summary())
    except Exception:  # the worker must start even if the sweep cannot run now
        logger.exception("worker start sweep failed; the scheduled sweep will retry")
