"""Bounded classification: a suggester proposes, this module decides what the proposal means.

The output is checked against the exact active set before anything reads it: a retired slug,
free text, a low confidence or an error becomes ``unresolved`` and the enquiry goes to review
with no category. A suggestion never authorises anything; only a reviewer's approval does.

Runs in a worker (the ledger's ``suggest.category`` operation), never in the intake request:
the provider is called outside any transaction, and only the result is written under a lock.
"""

import math
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from intake.models import Category, Enquiry, EnquiryState, Revision, Suggestion
from intake.revisions import add_revision
from intake.suggesters import Answer, Candidate, Suggester, SuggesterError, get_suggester

UNRESOLVED = Suggestion.UNRESOLVED
VALID = "valid"
MAX_RAW_OUTPUT = 4000
# Revisions a person did not make: a suggestion may set the category only while all are like this.
MACHINE_ORIGINS = ("intake", "suggestion", "extraction")


@dataclass(frozen=True)
class Verdict:
    label: str  # an active slug, or "unresolved"
    validation: str  # "valid", or why the output was turned away
    confidence: float | None

    @property
    def valid(self) -> bool:
        return self.validation == VALID


def candidates_from(categories) -> list[Candidate]:
    return [
        Candidate(
            slug=c.slug,
            name=c.name,
            description=c.description,
            keywords=tuple(c.keyword_list()),
        )
        for c in categories
    ]


def active_candidates() -> list[Candidate]:
    return candidates_from(Category.objects.filter(active=True).order_by("slug"))


def _confidence(value) -> tuple[float | None, str | None]:
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None, f"confidence {str(value)[:40]!r} is not a number"
    if not 0 <= value <= 1:
        return None, f"confidence {value} is outside 0..1"
    return float(value), None


def judge(answer: Answer, *, active: set[str], retired: set[str], min_confidence: float):
    """What a suggester's answer is allowed to mean, given the exact active set."""
    confidence, problem = _confidence(answer.confidence)
    if answer.label is None:
        reason = answer.explanation or "no label"
        return Verdict(UNRESOLVED, f"abstained: {reason}"[:200], confidence)
    label = answer.label
    if label in active:
        if problem:
            return Verdict(UNRESOLVED, problem[:200], None)
        if confidence is not None and confidence < min_confidence:
            return Verdict(
                UNRESOLVED, f"confidence {confidence:.2f} is below {min_confidence:.2f}", confidence
            )
        return Verdict(label, VALID, confidence)
    if label in retired:
        return Verdict(UNRESOLVED, f"{label!r} is a retired category", confidence)
    return Verdict(UNRESOLVED, f"{label[:80]!r} is not an active category"[:200], confidence)


def model_actor(suggester: Suggester) -> str:
    name = (
        suggester.name
        if suggester.name == suggester.model
        else f"{suggester.name}/{suggester.model}"
    )
    return f"model:{name}@{suggester.prompt_version}"[:150]


def _text_of(revision: Revision) -> str:
    fields = revision.fields or {}
    return "\n\n".join(part for part in (fields.get("subject"), fields.get("message")) if part)


def _resolve(provider) -> Suggester:
    if provider is None or isinstance(provider, str):
        return get_suggester(provider)
    return provider


def suggest_category(enquiry, *, provider=None, force=False, raise_retryable=False) -> Suggestion:
    """Run a suggester on the current revision and store what validation made of its answer.

    Returns the existing suggestion for the current revision instead of asking again, unless
    ``force``. A provider error is stored as an ``unresolved`` suggestion; with
    ``raise_retryable`` a retryable SuggesterError propagates instead and nothing is stored (the
    ledger's bounded retry uses that, then calls once more without it). Never raises for a bad
    output.
    """
    suggester = _resolve(provider)
    enquiry = Enquiry.objects.get(pk=enquiry.pk)
    revision = enquiry.revision
    if not force:
        existing = enquiry.suggestions.filter(
            Q(revision=revision.number) | Q(applied_revision=revision.number)
        ).first()
        if existing is not None:
            return existing

    # The call happens outside any transaction: no lock is held while a model thinks.
    try:
        answer = suggester.suggest(_text_of(revision), active_candidates())
    except SuggesterError as exc:
        if raise_retryable and exc.retryable:
            raise
        answer = Answer(None, None, "", f"provider error: {exc}")
        error = f"provider error: {exc}"
    except Exception as exc:  # a suggester's bug must not lose the enquiry: it goes to review
        answer = Answer(None, None, "", "")
        error = f"provider error: {exc.__class__.__name__}: {exc}"
    else:
        error = None

    actor = model_actor(suggester)
    with transaction.atomic():
        enquiry = Enquiry.objects.select_for_update().get(pk=enquiry.pk)
        # Validated under the lock: a category retired while the model was thinking is retired.
        categories = {c.slug: c for c in Category.objects.all()}
        verdict = judge(
            answer,
            active={slug for slug, c in categories.items() if c.active},
            retired={slug for slug, c in categories.items() if not c.active},
            min_confidence=settings.SUGGESTER_MIN_CONFIDENCE,
        )
        validation = error[:200] if error else verdict.validation
        suggestion = Suggestion.objects.create(
            enquiry=enquiry,
            revision=revision.number,
            provider=suggester.name,
            model=suggester.model[:120],
            prompt_version=suggester.prompt_version[:32],
            raw_output=(answer.raw_output or "")[:MAX_RAW_OUTPUT],
            label=verdict.label,
            category=categories.get(verdict.label) if verdict.valid else None,
            confidence=verdict.confidence,
            validation=validation,
            explanation=(answer.explanation or "")[:2000],
        )
        if verdict.valid and not error and _may_apply(enquiry, revision.number):
            _apply(enquiry, suggestion, actor)
        if enquiry.state == EnquiryState.VALIDATED:
            enquiry.mark_ready_for_review(
                actor=actor,
                reason="category suggested" if suggestion.category_id else "category unresolved",
                evidence={
                    "suggestion": suggestion.pk,
                    "label": suggestion.label,
                    "validation": suggestion.validation,
                    "confidence": suggestion.confidence,
                },
            )
            enquiry.save()
    return suggestion


def _may_apply(enquiry: Enquiry, seen_revision: int) -> bool:
    """A reviewer's choice always wins; after approval nothing a model says changes the record."""
    if enquiry.state not in (EnquiryState.VALIDATED, EnquiryState.READY_FOR_REVIEW):
        return False
    if enquiry.current_revision != seen_revision:
        return False  # someone revised it while the model was thinking
    return not enquiry.revisions.exclude(origin__in=MACHINE_ORIGINS).exists()


def _apply(enquiry: Enquiry, suggestion: Suggestion, actor: str) -> Revision:
    previous = enquiry.revision
    category = suggestion.category
    revision = add_revision(
        enquiry,
        previous,
        fields={**previous.fields, "category": category.slug},
        category=category,
        origin="suggestion",
        note=f"category suggested by {actor} (suggestion {suggestion.pk})",
        actor=actor,
        reason="category suggested",
    )
    suggestion.applied_revision = revision.number
    suggestion.save(update_fields=["applied_revision"])
    return revision


def record_review_outcome(enquiry) -> int:
    """At approval, what the reviewer made of each suggestion not yet judged (the dashboard's
    classification quality): the approved category is its label (accepted), another category
    (overridden), or the suggester had none (unresolved). Returns how many were judged."""
    slug = enquiry.category.slug if enquiry.category_id else None
    waiting = Suggestion.objects.filter(enquiry=enquiry, review_outcome="")
    judged = waiting.filter(label=Suggestion.UNRESOLVED).update(review_outcome="unresolved")
    if slug is not None:
        judged += waiting.filter(label=slug).update(review_outcome="accepted")
    judged += waiting.exclude(label=Suggestion.UNRESOLVED).update(review_outcome="overridden")
    return judged
