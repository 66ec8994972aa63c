"""Operator actions: POST only, a required reason, the role's permission, then a service.

Order of refusals: GET -> 405; no permission for this action -> 403; no such item -> 404; no
reason (or a bad field) -> the page again, 422, with what was typed kept and the field named;
the state or policy does not allow it -> the page again, 409, input kept (the service re-checks
under its row lock). Success -> a redirect to the card acted on, its message shown in that card.
"""

from django.contrib import messages
from django.db.models import Exists, OuterRef
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from intake import services as intake_services
from intake.models import Enquiry, EnquiryState, Revision
from ledger import policies
from ledger import services as ledger_services
from recovery import messages as said
from recovery import permissions
from recovery.forms import CompleteByHandForm, EditForm, ReasonForm, ReassignForm
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
from recovery.words import OPERATOR_ACTIONS, in_sentence

# action -> (form, ledger service name, extra kwargs from the form); its success message is
# recovery.messages.OPERATION_DONE[action]
OPERATION_ACTIONS = {
    "reconcile": (ReasonForm, "reconcile_now", ()),
    "retry": (ReasonForm, "retry_operation", ()),
    "complete_by_hand": (CompleteByHandForm, "complete_by_hand", ("external_id",)),
    "cancel": (ReasonForm, "cancel_operation", ()),
    "compensate": (ReasonForm, "compensate", ()),
    "approve": (ReasonForm, "approve_operation", ()),
    "reassign": (ReassignForm, "reassign_operation", ("owner",)),
}


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


def _enquiryless_action(request, op, action, form, service_name, extra, back, done):
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect(back)
    if action not in policies.state_allows(op):
        label = OPERATOR_ACTIONS[action][0].lower()
        messages.error(
            request,
            said.CANNOT_FOR_OPERATION % {"action": label, "state": op.get_state_display()},
        )
        return redirect(back)
    kwargs = {name: form.cleaned_data[name] for name in extra}
    try:
        getattr(ledger_services, service_name)(
            op.pk, actor=request.user, reason=form.cleaned_data["reason"], **kwargs
        )
    except REFUSALS as exc:
        messages.error(request, str(exc) or said.NOT_POSSIBLE_FOR_ITEM)
        return redirect(back)
    messages.success(request, done)
    return redirect(back)


@require_POST
@console_view
def operation_action(request, op_id, action):
    op = get_operation_for_user(request.user, op_id)
    label = OPERATOR_ACTIONS[action][0].lower()
    try:
        permission = policies.permission_for(op, action)
    except KeyError:
        permission = "ledger.recover_operation"
    require(request.user, permission, label)
    target = op_target(op)
    back = item_url(op) + f"?op={op.pk}#{target}"
    form_class, service_name, extra = OPERATION_ACTIONS[action]
    done = said.OPERATION_DONE[action]
    form = form_class(request.POST)
    context = {"request": request, "enquiry": op.enquiry, "target": target, "action": action}
    if op.enquiry_id is None:
        # A message to an operator: its own small page, refusals said there.
        return _enquiryless_action(request, op, action, form, service_name, extra, back, done)
    if not form.is_valid():
        return refused(**context, form=form, status=422)
    try:
        possible = policies.state_allows(op)
    except KeyError:
        possible = []
    if action not in possible:
        message = said.CANNOT_FOR_OPERATION % {
            "action": OPERATOR_ACTIONS[action][0],
            "state": in_sentence(op.get_state_display()),
        }
        return refused(**context, form=form, status=409, message=message)
    if action == "cancel" and op.ends_enquiry():
        done = said.CANCELLED_ENDS_ENQUIRY % {"reference": op.enquiry.reference}
    kwargs = {name: form.cleaned_data[name] for name in extra}
    try:
        getattr(ledger_services, service_name)(
            op.pk, actor=request.user, reason=form.cleaned_data["reason"], **kwargs
        )
    except REFUSALS as exc:
        log.info("refused %s by %s: %s", request.path, request.user, exc)
        message = str(exc) or said.NOT_POSSIBLE_FOR_ITEM
        return refused(**context, form=form, status=409, message=message)
    return succeeded(request, back, target, done)


@require_POST
@console_view
def enquiry_action(request, reference, action):
    enquiry = get_enquiry_for_user(request.user, reference)
    label = OPERATOR_ACTIONS[action][0].lower()
    if action == "assign":
        if not permissions.can_assign(request.user):
            require(request.user, permissions.ASSIGN_PERMISSIONS[0], label)
    else:
        require(request.user, permissions.ENQUIRY_PERMISSIONS[action], label)
    back = safe_next(request, reverse("recovery:enquiry", args=[reference]))
    # The edit form lives on the review page: a refused edit comes back there.
    page = "review" if back.startswith("/console/review/") or action == "edit" else "item"
    user = request.user
    if action == "edit":
        current = enquiry.revisions.filter(number=enquiry.current_revision).first()
        form = EditForm(request.POST, revision=current)
    elif action == "assign":
        form = ReassignForm(request.POST)
    else:
        form = ReasonForm(request.POST)
    context = {
        "request": request,
        "enquiry": enquiry,
        "target": ENQUIRY_TARGET,
        "action": action,
        "page": page,
    }
    if not form.is_valid():
        return refused(**context, form=form, status=422)
    if action not in permissions.enquiry_actions(enquiry, user):
        message = said.CANNOT_FOR_ENQUIRY % {
            "action": OPERATOR_ACTIONS[action][0],
            "state": in_sentence(enquiry.get_state_display()),
        }
        return refused(**context, form=form, status=409, message=message)
    reason = form.cleaned_data["reason"]
    if action == "edit":
        fields = form.changed_fields()
        category = form.cleaned_data.get("category")
        if not fields and (category is None or (current and category == current.category)):
            message = said.EDIT_CHANGED_NOTHING
            return refused(**context, form=form, status=422, message=message)

        def call():
            intake_services.revise_enquiry(
                enquiry.pk, actor=user, reason=reason, fields=fields, category=category
            )
    elif action == "approve_revision":

        def call():
            ledger_services.approve_revision(enquiry.pk, actor=user, reason=reason)
    elif action == "assign":

        def call():
            intake_services.assign_enquiry(
                enquiry.pk, actor=user, reason=reason, owner=form.cleaned_data["owner"]
            )
    else:
        service = {
            "request_information": intake_services.request_information,
            "information_received": intake_services.information_received,
            "reject": intake_services.reject_enquiry,
        }[action]

        def call():
            service(enquiry.pk, actor=user, reason=reason)

    try:
        call()
    except REFUSALS as exc:
        log.info("refused %s by %s: %s", request.path, request.user, exc)
        message = str(exc) or said.NOT_POSSIBLE_FOR_ENQUIRY
        return refused(**context, form=form, status=409, message=message)
    if page == "review" and action in REVIEW_DECISIONS:
        return next_for_review(request, enquiry, said.ENQUIRY_DONE[action])
    return succeeded(request, f"{back}#actions", ENQUIRY_TARGET, said.ENQUIRY_DONE[action])


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
        message = said.REVIEWED_NONE_WAITING % {"reference": decided.reference, "done": done}
        if skipped:
            message = said.REVIEWED_ONLY_OWN_EDITS % {
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
        said.REVIEWED_NEXT_WAITING
        % {"reference": decided.reference, "done": done, "next": waiting},
    )
    # The next enquiry opens at its top (its words, its diff), not at the form's #actions.
    return redirect(reverse("recovery:review-item", args=[waiting]) + "#content")
