"""Scheduled work for the console (django-q2 Schedule "recovery.escalate_overdue")."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.utils import timezone

from config.context import background_run
from intake import answers
from intake.models import Enquiry
from intake.residentmodels import ResidentAnswer
from ledger import journal
from ledger import services as ledger_services
from ledger.models import Integration, Operation
from recovery import ownership, queue, timefmt
from recovery.models import Escalation

log = logging.getLogger("recovery.tasks")
ACTOR = "system:escalation"


def _subject(row):
    if row["q_kind"] == queue.KIND_OPERATION:
        return "ledger.operation", Operation.objects.select_related("owner").get(pk=row["q_key"])
    if row["q_kind"] == queue.KIND_ENQUIRY:
        return "intake.enquiry", Enquiry.objects.select_related("owner").get(reference=row["q_key"])
    if row["q_kind"] == queue.KIND_ANSWER:
        return "intake.residentanswer", ResidentAnswer.objects.select_related("owner").get(
            pk=row["q_key"]
        )
    return "ledger.integration", Integration.objects.select_related("owner").get(name=row["q_key"])


@background_run("escalate")
def escalate_overdue(now=None) -> int:
    """Hand each overdue queue item to its policy's backup owner, once per stay in a state.

    Safe to run anywhere, any number of times at once: the Escalation row (unique per subject
    and the moment it entered its state) is inserted in the same transaction as the hand-over,
    so a second runner fails on the unique index and does nothing.
    """
    now = now or timezone.now()
    ids = dict(Integration.objects.values_list("name", "pk"))
    escalated = 0
    for row in queue.all_rows(now, queue.Filters(overdue=True)):
        policy = ownership.policy_for(row["q_queue"], ids.get(row["q_integration"]))
        backup = policy.backup_owner if policy else None
        try:
            with transaction.atomic():
                subject_type, subject = _subject(row)
                Escalation.objects.create(
                    subject_type=subject_type,
                    subject_id=str(subject.pk),
                    queue=row["q_queue"],
                    state_since=row["q_since"],
                    escalated_to=backup,
                )
                previous = subject.owner
                due = timefmt.local(row["q_due"])
                reason = (
                    f"overdue since {due}; handed to the backup owner"
                    if backup
                    else f"overdue since {due}; no backup owner set"
                )
                if backup is not None and previous != backup:
                    if subject_type == "ledger.operation":
                        ownership.reassign_operation(
                            subject.pk, actor=ACTOR, reason=reason, owner=backup
                        )
                    elif subject_type == "intake.enquiry":
                        ownership.assign_enquiry(
                            subject.pk, actor=ACTOR, reason=reason, owner=backup
                        )
                    elif subject_type == "intake.residentanswer":
                        answers.assign_answer(subject.pk, actor=ACTOR, reason=reason, owner=backup)
                journal.record(
                    subject,
                    "recovery.escalated",
                    actor=ACTOR,
                    reason=reason,
                    evidence={
                        "queue": row["q_queue"],
                        "due": row["q_due"].isoformat(),
                        # Whom it was taken from: the person it was given to, else the
                        # queue's owner (who owned it in effect).
                        "from": (previous or (policy.owner if policy else None)).get_username()
                        if (previous or (policy and policy.owner_id))
                        else None,
                        "to": backup.get_username() if backup else None,
                    },
                )
        except IntegrityError:
            continue  # escalated already (by an earlier run or a concurrent one)
        except ledger_services.ActionRefused as exc:
            # The item moved on between the read and the lock: nothing to escalate.
            log.info("not escalated %s %s: %s", row["q_kind"], row["q_key"], exc)
            continue
        escalated += 1
    return escalated


def notify_operators(now=None) -> dict:
    """Schedule "recovery.notify_operators" (every minute): tell people what needs them, in one
    batched message per person per OPERATOR_NOTICE_MINUTES (recovery.notices)."""
    from recovery import notices

    return notices.run(now)
