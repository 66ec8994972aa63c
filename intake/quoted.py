"""A new enquiry that may be a reply: sent from the address of an open enquiry and quoting its
reference (``ENQ-…``). Intake stores it as a new enquiry (a signed event is never turned into
something else by guesswork); the review page offers it to the reviewer as a reply to the one
it quotes, and one click with a reason attaches it: its words become a revision of the open
enquiry by the resident (intake.answers), and the new enquiry is closed as *rejected* (the
machine's closed-without-delivery state), journalled on both as attached. Nothing is merged
silently, and nothing is attached that the reviewer did not choose.
"""

from __future__ import annotations

import re

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from intake import signals
from intake.answers import ANSWERABLE, add_to_enquiry
from intake.models import Enquiry, EnquiryState
from intake.residentmodels import AnswerChannel, AnswerState, ResidentAnswer
from intake.workflow import ActionRefused, require_reason

REFERENCE = re.compile(r"\bENQ-[A-HJ-NP-Z2-9]{8}\b", re.IGNORECASE)
# The states a new enquiry can be closed from as attached (reject's sources).
CLOSABLE = (EnquiryState.VALIDATED, EnquiryState.READY_FOR_REVIEW, EnquiryState.NEEDS_INFORMATION)


def quoted_references(enquiry: Enquiry) -> list[str]:
    text = f"{enquiry.subject}\n{enquiry.message}"
    return list(dict.fromkeys(m.upper() for m in REFERENCE.findall(text)))[:10]


def quoted_open_enquiry(enquiry: Enquiry) -> Enquiry | None:
    """The older enquiry from the same address, still able to take an answer, that this one
    quotes; None when there is none or more than one (no guess)."""
    if not enquiry.email or enquiry.state not in CLOSABLE:
        return None
    references = [r for r in quoted_references(enquiry) if r != enquiry.reference]
    if not references:
        return None
    found = list(
        Enquiry.objects.filter(
            reference__in=references,
            email=enquiry.email,
            state__in=ANSWERABLE,
            created_at__lte=enquiry.created_at,
        ).exclude(pk=enquiry.pk)[:2]
    )
    return found[0] if len(found) == 1 else None


def attach_as_reply(enquiry_id, *, target_reference: str, actor, reason) -> Enquiry:
    """Make the new enquiry ``enquiry_id`` a reply to the open one it quotes: a revision of
    that one (its words, as the resident's answer), and the new one closed as rejected with
    the reason and where it went. Returns the open enquiry."""
    reason = require_reason(reason, actor=actor)
    if isinstance(actor, AbstractBaseUser) and not actor.has_perm("intake.review_enquiry"):
        raise PermissionDenied(f"{actor.get_username()} may not attach enquiries")
    target_id = (
        Enquiry.objects.filter(reference=str(target_reference or "").upper()[:32])
        .values_list("pk", flat=True)
        .first()
    )
    if target_id is None or target_id == enquiry_id:
        raise ActionRefused("There is no other enquiry with that reference.")
    with transaction.atomic():
        # Both locked, always in the same order, so two reviewers cannot deadlock.
        locked = {
            e.pk: e
            for e in Enquiry.objects.select_for_update()
            .filter(pk__in=[enquiry_id, target_id])
            .order_by("pk")
        }
        new, target = locked[enquiry_id], locked[target_id]
        if quoted_open_enquiry(new) != target:
            raise ActionRefused(
                f"{new.reference} is no longer a possible reply to {target.reference} (one of "
                "them has moved on, or it does not quote it from the same address)."
            )
        now = timezone.now()
        answer = ResidentAnswer.objects.create(
            enquiry=target,
            channel=AnswerChannel.INTAKE,
            state=AnswerState.NOT_ATTACHED,
            sender=new.email,
            subject=new.subject,
            text=_words(new),
            received_at=new.created_at,
            state_changed_at=now,
        )
        add_to_enquiry(
            target, answer, [], actor=actor, reason=f"{new.reference} attached: {reason}"
        )
        evidence = {"attached_to": target.reference, "answer": str(answer.pk)}
        new.reject(
            actor=actor,
            reason=f"attached to {target.reference} as a reply: {reason}",
            evidence=evidence,
        )
        new.save()
        signals.enquiry_action.send(
            sender=Enquiry,
            enquiry=new,
            action="intake.enquiry.attached_as_reply",
            actor=actor,
            reason=reason,
            evidence=evidence,
        )
    return target


def _words(enquiry: Enquiry) -> str:
    lines = [f"(Sent as a new enquiry, {enquiry.reference})"]
    if enquiry.subject:
        lines.append(f"Subject: {enquiry.subject}")
    lines.append(enquiry.message)
    documents = [f"{d.get('id')} version {d.get('version')}" for d in enquiry.documents or []]
    if documents:
        lines.append("Documents named: " + ", ".join(documents))
    return "\n".join(lines)
