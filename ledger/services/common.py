"""What every service shares: the refusal, the checks of who and why, and the one skeleton of
a person's action on an operation (operator_action). Why intake's actions have a skeleton of
their own, and what the two share: intake/services.py's docstring."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction

from intake.models import Enquiry
from intake.workflow import ActionRefused, require_reason
from ledger import journal, messages
from ledger.execution import lock_operation
from ledger.models import Operation
from ledger.policies import APPROVE, CANCEL, PERMISSIONS, RETRY, permission_for, state_allows


def require_permission(actor, permission):
    if isinstance(actor, AbstractBaseUser):
        if not (actor.is_active and actor.has_perm(permission)):
            raise PermissionDenied(
                messages.MAY_NOT
                % {"actor": actor.get_username(), "who": messages.holders(permission)}
            )
    elif not str(actor).startswith("system:"):
        raise PermissionDenied(messages.SYSTEM_MAY_NOT % {"actor": actor})


@dataclass
class Acting:
    """A person's action under way: the locked enquiry and operation, who acts and why. Its
    journal entries and transitions carry that actor and that reason."""

    enquiry: Enquiry
    op: Operation
    actor: object
    reason: str

    def transition(self, method, *, evidence=None):
        """Call a transition (``op.retry``, ``enquiry.withdraw``) as this actor for this
        reason; django-fsm's signal journals it (ledger.journal)."""
        method(actor=self.actor, reason=self.reason, evidence=evidence)

    def journal(self, action, *, subject=None, evidence=None, **states):
        """A journal entry that is not a transition, about the operation unless ``subject``."""
        return journal.record(
            subject if subject is not None else self.op,
            action,
            actor=self.actor,
            reason=self.reason,
            evidence=evidence,
            **states,
        )


@contextmanager
def operator_action(op_id, action, *, actor, reason) -> Iterator[Acting]:
    """The skeleton of every person's action on an operation, in one transaction: a reason
    with visible text; the enquiry, then the operation, locked; ``action`` offered by the
    operation's state and policy (ledger.policies.state_allows); the actor's permission.

    A fixed permission (ledger.policies.PERMISSIONS) is checked before anything is locked; one
    that depends on the operation (ledger.policies.permission_for: approve, its policy's;
    cancel, a reviewer's when it ends the enquiry; retry, a coordinator's when the destination
    never received the write) is checked under the lock, on the row as it
    is now. Refusals: ActionRefused (no reason, no such operation, not offered),
    PermissionDenied (the role says no).
    """
    reason = require_reason(reason)
    fixed = None if action in (APPROVE, CANCEL, RETRY) else PERMISSIONS[action]
    if fixed:
        require_permission(actor, fixed)
    with transaction.atomic():
        enquiry, op = lock_operation(op_id)
        if op is None:
            raise ActionRefused(messages.NO_SUCH_OPERATION)
        if action not in state_allows(op):
            raise ActionRefused(
                messages.NOT_OFFERED
                % {"action": action.replace("_", " "), "state": op.state, "operation": op.action}
            )
        if not fixed:
            require_permission(actor, permission_for(op, action))
        yield Acting(enquiry, op, actor, reason)
