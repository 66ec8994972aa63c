"""Writing the journal: every transition (through django-fsm's signal) and every action."""

from contextlib import contextmanager
from contextvars import ContextVar

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.dispatch import receiver
from django_fsm.signals import post_transition

from config import roundtrip
from config.context import current_request_id
from intake.models import Enquiry
from intake.workflow import actor_label
from ledger.models import ErasableReason, JournalEntry


def _subject(instance):
    meta = instance._meta
    enquiry_id = (
        instance.pk if isinstance(instance, Enquiry) else getattr(instance, "enquiry_id", None)
    )
    return f"{meta.app_label}.{meta.model_name}", str(instance.pk), enquiry_id


# Rows that record() collects inside a deferred() block instead of inserting one by one.
_pending: ContextVar[list | None] = ContextVar("journal_pending", default=None)


@contextmanager
def deferred():
    """Collect the rows written in this block and insert them in one statement at its end.

    For a hot path that writes several rows in one transaction (the receipt writes four or
    more): the same rows, in the same order (``at`` is stamped when each is recorded), one
    round trip instead of one each. Use it inside the transaction: the rows commit or roll
    back with it, and an exception in the block discards them with everything else. Nested
    blocks leave the writing to the outermost. Not for a block that rolls back a savepoint
    and carries on: rows recorded inside that savepoint would still be written at the end.
    """
    if _pending.get() is not None:
        yield
        return
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("journal.deferred() must run inside transaction.atomic()")
    rows: list[JournalEntry] = []
    token = _pending.set(rows)
    try:
        yield
    finally:
        _pending.reset(token)
    if rows:
        _insert(rows)


def _insert(rows):
    """The rows in one INSERT: queued with the transaction's other writes inside
    config.roundtrip.together(). A person's reason needs its row's id first, so rows that
    carry one are inserted at once (the block's queued writes go first)."""
    if any(getattr(row, "_erasable_text", "") for row in rows):
        JournalEntry.objects.bulk_create(rows)
        _keep_reasons(rows)
    else:
        roundtrip.insert(rows)


def _keep_reasons(rows):
    """A person's reason goes beside its row, where the purge can erase it (ErasableReason)."""
    kept = [
        ErasableReason(entry=row, text=row._erasable_text)
        for row in rows
        if getattr(row, "_erasable_text", "")
    ]
    if kept:
        ErasableReason.objects.bulk_create(kept)


def record(subject, action, *, actor, reason="", evidence=None, from_state="", to_state=""):
    """Append one journal row about ``subject`` (an enquiry, an operation, an integration)."""
    subject_type, subject_id, enquiry_id = _subject(subject)
    person = isinstance(actor, AbstractBaseUser)
    entry = JournalEntry(
        subject_type=subject_type,
        subject_id=subject_id,
        enquiry_id=enquiry_id,
        action=action,
        request_id=current_request_id(),
        from_state=from_state,
        to_state=to_state,
        actor=actor_label(actor),
        actor_user=actor if person else None,
        kept_reason="" if person else (reason or ""),
        evidence=evidence or {},
    )
    entry._erasable_text = (reason or "") if person else ""
    pending = _pending.get()
    if pending is not None:
        pending.append(entry)
    else:
        _insert([entry])
    return entry


@receiver(post_transition, dispatch_uid="handover.journal_transition")
def journal_transition(sender, instance, name, source, target, method_kwargs, **kwargs):
    # A transition outside a transaction could leave a journal row without its state change (or
    # the reverse); services wrap transition + save in transaction.atomic().
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError(f"{sender.__name__}.{name} must run inside transaction.atomic()")
    subject_type, _, _ = _subject(instance)
    evidence = dict(method_kwargs.get("evidence") or {})
    if "exception" in kwargs:
        evidence["exception"] = repr(kwargs["exception"])
    record(
        instance,
        f"{subject_type}.{name}",
        actor=method_kwargs.get("actor"),
        reason=method_kwargs.get("reason", ""),
        evidence=evidence,
        from_state=source,
        to_state=target,
    )
