"""Operator actions: POST only, a required reason, the role's permission, then a service.

Order of refusals: GET -> 405; no permission for this action -> 403; no such item -> 404; no
reason (or a bad field) -> the page again, 422, with what was typed kept and the field named;
the state or policy does not allow it -> the page again, 409, input kept (the service re-checks
under its row lock). Success -> a redirect to the card acted on, its message shown in that card.
"""

from dataclasses import dataclass

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

import recovery.messages
from intake.models import Enquiry, EnquiryState, Revision
from ledger import policies
from recovery import permissions
from recovery.operator_actions import ENQUIRY, ENQUIRY_ACTIONS, OPERATION, OPERATION_ACTIONS
from recovery.views.common import (
    REFUSALS,
    console_view,
    get_enquiry_for_user,
    get_operation_for_user,
    item_url,
    log,
    require,
    safe_next,
)
from recovery.views.items import ENQUIRY_TARGET, render_item
from recovery.words import in_sentence


def op_target(op) -> str:
    return f"op-{op.pk}"


def refused(request, enquiry, *, target, action, form, status, message="", page="item"):
    """The page the operator acted on, again: the form open, what they typed in it, each error
    next to (and naming) its field, and the refusal in the card they acted in."""
    bound = {
        "target": target,
        "action": action,
        "data": form.data,
        "errors": named_errors(form),
        "message": message,
    }
    return render_item(
        request,
        enquiry,
        page=page,
        bound=bound,
        edit_form=form if action == "edit" else None,
        status=status,
    )


def named_errors(form) -> list[str]:
    named = []
    for name, errors in form.errors.items():
        field = form.fields.get(name)
        label = (field.label or name.replace("_", " ").capitalize()) if field else ""
        for error in errors:
            # The reason's own message already says what it is for.
            named.append(error if name in ("reason", "__all__") else f"{label}: {error}")
    return named


def succeeded(request, url, target, done):
    messages.success(request, done, extra_tags=f"at-{target}")
    return redirect(url)


@dataclass(frozen=True)
class Refusal:
    """Why an action was not done: 403 (the person may not), 422 (the form, or nothing would
    change), 409 (not now: the state, the policy, or the service under its lock)."""

    status: int
    message: str
    form: object = None


def permission_for(action, subject) -> str:
    """The permission this person needs for this action on this subject: an operation's is
    its policy's (ledger.policies.permission_for); an enquiry's, the registry's first."""
    if action.subject == OPERATION:
        try:
            return policies.permission_for(subject, action.name)
        except KeyError:
            return "ledger.recover_operation"
    return action.permissions[0]


def allowed_now(action, subject, user) -> list[str]:
    """What the subject's state offers now (an enquiry's: to this person)."""
    if action.subject == ENQUIRY:
        return permissions.enquiry_actions(subject, user)
    try:
        return policies.state_allows(subject)
    except KeyError:
        return []


def act(user, action, subject, data) -> Refusal | None:
    """The one skeleton of every operator action, on an operation or an enquiry, from its page
    or in bulk (recovery.views.bulk, per item): the person's permission (403, in the words
    recovery.views.common.require uses), the form and its reason rule (422 when it is not
    valid), the state and policy (409 when they do not allow it now), a request that would
    change nothing (422), then the registry's service, which journals it as this person with
    this reason (409 when it refuses under its lock). Returns None when it was done; else the
    Refusal."""
    may = action.may(user) if action.subject == ENQUIRY else None
    if not may:
        try:
            require(user, permission_for(action, subject), action.label.lower())
        except PermissionDenied as exc:
            return Refusal(403, str(exc))
    form = action.make_form(data, subject)
    if not form.is_valid():
        return Refusal(422, "", form)
    if action.name not in allowed_now(action, subject, user):
        message = recovery.messages.CANNOT_FOR_OPERATION
        if action.subject == ENQUIRY:
            message = recovery.messages.CANNOT_FOR_ENQUIRY
        state = in_sentence(subject.get_state_display())
        return Refusal(409, message % {"action": action.label, "state": state}, form)
    if nothing := action.nothing_to_do(subject, form):
        return Refusal(422, nothing, form)
    try:
        action.perform(subject, form, user)
    except REFUSALS as exc:
        log.info("refused %s on %s by %s: %s", action.name, subject.pk, user, exc)
        fallback = recovery.messages.NOT_POSSIBLE_FOR_ITEM
        if action.subject == ENQUIRY:
            fallback = recovery.messages.NOT_POSSIBLE_FOR_ENQUIRY
        return Refusal(409, str(exc) or str(fallback), form)
    except PermissionDenied as exc:  # a permission that depends on the row, under its lock
        return Refusal(403, str(exc) or str(recovery.messages.MAY_NOT), form)
    return None


def on_page(refusal: Refusal | None, on_refusal):
    """A refusal from the item's page: 403 as the forbidden page, else ``on_refusal``."""
    if refusal is None:
        return None
    if refusal.status == 403:
        raise PermissionDenied(refusal.message)
    return on_refusal(refusal.form, refusal.status, refusal.message)


@require_POST
@console_view
def operation_action(request, op_id, action):
    op = get_operation_for_user(request.user, op_id)
    action = OPERATION_ACTIONS[action]
    target = op_target(op)
    back = item_url(op) + f"?op={op.pk}#{target}"
    done = action.consequence(op)
    if op.enquiry_id is None:
        # A message to an operator: its own small page, refusals said there, at the top.

        def on_refusal(form, status, message):
            errors = [e for field in form.errors.values() for e in field]
            if (
                status == 409
                and not form.errors
                and action.name not in allowed_now(action, op, None)
            ):
                message = recovery.messages.CANNOT_FOR_OPERATION % {
                    "action": action.label.lower(),
                    "state": op.get_state_display(),
                }
            for error in errors or [message]:
                messages.error(request, error)
            return redirect(back)

        answer = on_page(act(request.user, action, op, request.POST), on_refusal)
        if answer is not None:
            return answer
        messages.success(request, done)
        return redirect(back)

    def on_refusal(form, status, message):
        return refused(
            request,
            op.enquiry,
            target=target,
            action=action.name,
            form=form,
            status=status,
            message=message,
        )

    answer = on_page(act(request.user, action, op, request.POST), on_refusal)
    return answer or succeeded(request, back, target, done)


@require_POST
@console_view
def enquiry_action(request, reference, action):
    enquiry = get_enquiry_for_user(request.user, reference)
    action = ENQUIRY_ACTIONS[action]
    back = safe_next(request, reverse("recovery:enquiry", args=[reference]))
    # The edit form lives on the review page: a refused edit comes back there.
    page = "review" if back.startswith("/console/review/") or action.name == "edit" else "item"

    def on_refusal(form, status, message):
        return refused(
            request,
            enquiry,
            target=ENQUIRY_TARGET,
            action=action.name,
            form=form,
            status=status,
            message=message,
            page=page,
        )

    answer = on_page(act(request.user, action, enquiry, request.POST), on_refusal)
    if answer is not None:
        return answer
    if page == "review" and action.name in REVIEW_DECISIONS:
        return next_for_review(request, enquiry, action.done)
    return succeeded(request, f"{back}#actions", ENQUIRY_TARGET, action.done)


# A decision on the review page opens the next enquiry waiting (as a pull request queue does).
REVIEW_DECISIONS = ("approve_revision", "reject", "request_information")


def next_for_review(request, decided, done):
    """The oldest other enquiry waiting for review that this person can decide (the review
    list's order), or the list. An enquiry whose current revision they edited is skipped:
    they may not approve their own edit, and opening it sent them round in a circle."""
    own_edit = Revision.objects.filter(
        enquiry=OuterRef("pk"), number=OuterRef("current_revision"), created_by=request.user
    )
    waiting = Enquiry.objects.filter(state=EnquiryState.READY_FOR_REVIEW).exclude(pk=decided.pk)
    following = (
        waiting.exclude(Exists(own_edit))
        .order_by("state_changed_at", "pk")
        .values_list("reference", flat=True)
        .first()
    )
    if following is None:
        skipped = waiting.filter(Exists(own_edit)).count()
        message = recovery.messages.REVIEWED_NONE_WAITING % {
            "reference": decided.reference,
            "done": done,
        }
        if skipped:
            message = recovery.messages.REVIEWED_ONLY_OWN_EDITS % {
                "reference": decided.reference,
                "done": done,
                "count": skipped,
            }
        messages.success(request, message)
        # A fragment of its own: the form's (#actions) would otherwise carry over the redirect.
        return redirect(reverse("recovery:review") + "#content")
    waiting = following
    messages.success(
        request,
        recovery.messages.REVIEWED_NEXT_WAITING
        % {"reference": decided.reference, "done": done, "next": waiting},
    )
    # The next enquiry opens at its top (its words, its diff), not at the form's #actions.
    return redirect(reverse("recovery:review-item", args=[waiting]) + "#content")
