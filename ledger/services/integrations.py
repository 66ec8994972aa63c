"""An integration's settings, its check, and pause, resume and the backlog a pause holds."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from config.destinations import shown
from intake.models import Enquiry
from ledger import journal, limits, messages, storable
from ledger.models import Integration, Operation, OperationState, kind_of
from ledger.policies import PERMISSIONS, RELEASE
from ledger.proposals import integration
from ledger.queueing import EXECUTE, batched, enqueue
from ledger.services.common import (
    ActionRefused,
    require_permission,
    require_reason,
)

# --- configuration ------------------------------------------------------------------------------


def _shown(row, name):
    """A field's value for the journal: a person by username, never a secret's value."""
    value = getattr(row, name)
    if isinstance(value, AbstractBaseUser):
        return value.get_username()
    return value


def token_must_be_retyped(row: Integration, changes: dict) -> bool:
    """Do ``changes`` move ``row`` (as stored) to another address while keeping its token?

    A token is entered for one destination: kept across a change of address it would be sent,
    as ``Authorization: Bearer``, to whatever host the new address names. ``changes["token"]``
    present (a typed token, or "" to remove it) is the admin's answer."""
    return (
        "base_url" in changes
        and changes["base_url"] != row.base_url
        and bool(row.token)
        and "token" not in changes
    )


def configure_integration(name, *, actor, reason, changes: dict) -> Integration:
    """Change an integration's settings (``changes``: field -> new value, fields of
    Integration.CONFIGURABLE only), validated as a whole, journalled field by field with the
    value before and after; a secret is journalled as "changed", never its value."""
    reason = require_reason(reason)
    require_permission(actor, "ledger.change_integration")
    unknown = set(changes) - set(Integration.CONFIGURABLE)
    if unknown:
        raise ActionRefused(messages.NOT_CONFIGURABLE % {"fields": ", ".join(sorted(unknown))})
    with transaction.atomic():
        row = Integration.objects.select_for_update().get(name=name)
        if token_must_be_retyped(row, changes):
            raise ValidationError({"token": messages.TOKEN_AGAIN_FOR_NEW_ADDRESS})
        diff = {}
        for field, value in changes.items():
            before = _shown(row, field)
            setattr(row, field, value)
            after = _shown(row, field)
            if before == after:
                continue
            if field in Integration.SECRET_FIELDS:
                diff[field] = "removed" if not after else ("set" if not before else "changed")
            elif field == "base_url":
                diff[field] = {"from": shown(before), "to": shown(after)}
            else:
                diff[field] = {"from": before, "to": after}
        if not diff:
            raise ActionRefused(messages.NOTHING_CHANGED % {"integration": row})
        row.full_clean()  # ValidationError: the view shows it on the field
        row.save(update_fields=[*diff])
        journal.record(
            row, "ledger.integration.configured", actor=actor, reason=reason, evidence=diff
        )
    return row


# --- pause, resume, backlog ---------------------------------------------------------------------


def backlog(name):
    """Work held while the integration was paused, oldest first: what an admin reviews."""
    return (
        Operation.objects.filter(integration__name=name, state=OperationState.APPROVED, held=True)
        .select_related("enquiry")
        .order_by("created_at")
    )


def check_integration(name, *, actor) -> list[str]:
    """Call the integration's destination as its kind knows how; the problems in plain words
    (none: ready). Nothing at the destination changes; the outcome is journalled, so a failed
    check stays visible beside the integration's other changes."""
    require_permission(actor, "ledger.pause_integration")
    row = integration(name)
    # Made storable (ledger.storable): a problem quotes the destination, which may hold a NUL.
    problems = [storable.text(p) for p in kind_of(row).check(row)]
    journal.record(
        row,
        "ledger.integration.checked",
        actor=actor,
        reason=f"{len(problems)} problem(s)" if problems else "ready",
        evidence={"kind": row.kind, "base_url": shown(row.base_url), "problems": problems},
    )
    return problems


def pause_integration(name, *, actor, reason) -> Integration:
    reason = require_reason(reason)
    require_permission(actor, "ledger.pause_integration")
    with transaction.atomic():
        row = Integration.objects.select_for_update().get(name=name)
        if row.paused:
            raise ActionRefused(messages.ALREADY_PAUSED % {"integration": row})
        row.paused = True
        row.paused_at = timezone.now()
        row.paused_by = actor if isinstance(actor, AbstractBaseUser) else None
        row.pause_reason = reason
        row.save()
        held = Operation.objects.filter(
            integration=row, state=OperationState.APPROVED, held=False
        ).update(held=True)
        journal.record(
            row, "ledger.integration.paused", actor=actor, reason=reason, evidence={"held": held}
        )
    return row


def resume_integration(name, *, actor, reason) -> Integration:
    """Unpause. The backlog stays held until an admin releases it (release_backlog)."""
    reason = require_reason(reason)
    require_permission(actor, "ledger.pause_integration")
    with transaction.atomic():
        row = Integration.objects.select_for_update().get(name=name)
        if not row.paused:
            raise ActionRefused(messages.NOT_PAUSED % {"integration": row})
        waiting = backlog(name).count()
        row.paused = False
        row.awaiting_backlog_review = waiting > 0
        row.save()
        journal.record(
            row,
            "ledger.integration.resumed",
            actor=actor,
            reason=reason,
            evidence={"backlog": waiting},
        )
    return row


def release_backlog(name, *, actor, reason, operation_ids=None) -> list[Operation]:
    """Release all of the reviewed backlog, or the chosen operations, with a reason.

    Oldest first. With a rate limit each operation is queued for its own turn, one interval
    apart (ledger.limits.turns), so the backlog drains at the integration's rate by itself.
    A backlog is thousands of rows after an outage: the enquiries, then the operations, are
    locked in one statement each (the one lock order), and the rows, their journal entries and
    their tasks are written in one statement per table, not one operation action at a time.

    What makes it an operator action is the registry's: its permission is the one the console's
    row ``release`` (recovery/operator_actions.py) reads, ledger.policies.PERMISSIONS[RELEASE]
    (the ledger sits below recovery, so both read it here); its reason rule is every action's
    (intake.workflow.require_reason); its label is the registry row's, used by the console.
    """
    reason = require_reason(reason)
    require_permission(actor, PERMISSIONS[RELEASE])
    with transaction.atomic(), journal.deferred(), batched():
        row = Integration.objects.select_for_update().get(name=name)
        if row.paused:
            raise ActionRefused(messages.PAUSED_BEFORE_RELEASE % {"integration": row})
        chosen = backlog(name)
        if operation_ids is not None:
            chosen = chosen.filter(pk__in=list(operation_ids))
        pairs = list(chosen.values_list("pk", "enquiry_id"))
        list(
            Enquiry.objects.select_for_update()
            .filter(pk__in={enquiry for _, enquiry in pairs})
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        released = list(
            Operation.objects.select_for_update(of=("self",))
            .filter(pk__in=[pk for pk, _ in pairs], state=OperationState.APPROVED, held=True)
            .order_by("created_at", "pk")
        )
        turns = limits.turns(row, len(released))
        now = timezone.now()
        for n, op in enumerate(released):
            op.held = False
            op.updated_at = now
            op.next_attempt_at = turns[n] if turns else None
            journal.record(op, "ledger.operation.released", actor=actor, reason=reason)
            enqueue(op, EXECUTE, at=op.next_attempt_at, save=False)
        Operation.objects.bulk_update(
            released, ["held", "next_attempt_at", "task_enqueued_at", "updated_at"], batch_size=1000
        )
        row.awaiting_backlog_review = backlog(name).exists()
        row.save(update_fields=["awaiting_backlog_review"])
        journal.record(
            row,
            "ledger.integration.backlog_released",
            actor=actor,
            reason=reason,
            evidence={"released": [str(op.pk) for op in released]},
        )
    return released
