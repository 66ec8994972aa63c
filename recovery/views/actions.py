"""Operator actions: POST only, a required reason, the role's permission, then a service.

Order of refusals: GET -> 405; no permission for this action -> 403; no such item -> 404; no
reason (or a bad field) -> a message, nothing changed; the state or policy does not allow it ->
a message, nothing changed (the service re-checks under its row lock). Success -> a message.
"""

from django.contrib import messages
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from intake import services as intake_services
from ledger import policies
from ledger import services as ledger_services
from recovery import permissions
from recovery.forms import CompleteByHandForm, EditForm, ReasonForm, ReassignForm
from recovery.views.common import (
    console_view,
    form_refused,
    get_enquiry_for_user,
    get_operation_for_user,
    require,
    run,
)
from recovery.words import OPERATOR_ACTIONS

# action -> (form, ledger service name, extra kwargs from the form, success message)
OPERATION_ACTIONS = {
    "reconcile": (ReasonForm, "reconcile_now", (), "Reconciliation started."),
    "retry": (ReasonForm, "retry_operation", (), "Retry queued with the same idempotency key."),
    "complete_by_hand": (
        CompleteByHandForm,
        "complete_by_hand",
        ("external_id",),
        "Completed by hand.",
    ),
    "cancel": (ReasonForm, "cancel_operation", (), "Cancelled. Nothing will be sent."),
    "compensate": (ReasonForm, "compensate", (), "Compensation proposed; it needs approval."),
    "approve": (ReasonForm, "approve_operation", (), "Approved."),
    "reassign": (ReassignForm, "reassign_operation", ("owner",), "Owner changed."),
}


def _operation_permission(op, action):
    if action == "approve":
        try:
            return policies.policy_for(op).approve_permission
        except KeyError:
            return "ledger.recover_operation"
    return permissions.OPERATION_PERMISSIONS[action]


@require_POST
@console_view
def operation_action(request, op_id, action):
    op = get_operation_for_user(request.user, op_id)
    label = OPERATOR_ACTIONS[action][0].lower()
    require(request.user, _operation_permission(op, action), label)
    back = reverse("recovery:enquiry", args=[op.enquiry.reference]) + f"?op={op.pk}#op-{op.pk}"
    form_class, service_name, extra, done = OPERATION_ACTIONS[action]
    form = form_class(request.POST)
    if not form.is_valid():
        return form_refused(request, form, back)
    try:
        possible = policies.state_allows(op)
    except KeyError:
        possible = []
    if action not in possible:
        messages.error(
            request, f"You cannot {label} an operation that is {op.get_state_display()}."
        )
        return redirect(back)
    kwargs = {name: form.cleaned_data[name] for name in extra}
    return run(
        request,
        back,
        lambda: getattr(ledger_services, service_name)(
            op.pk, actor=request.user, reason=form.cleaned_data["reason"], **kwargs
        ),
        done,
    )


ENQUIRY_DONE = {
    "approve_revision": "Approved: delivery to the CRM is queued.",
    "edit": "Saved as a new revision; it needs review again.",
    "request_information": "Information requested; the enquiry waits for the customer.",
    "information_received": "Back in the review queue.",
    "reject": "Rejected.",
    "assign": "Owner changed.",
}


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
    back = request.POST.get("next", "")
    if not back.startswith("/console/") or "//" in back:
        back = reverse("recovery:enquiry", args=[reference])
    user = request.user
    if action == "edit":
        current = enquiry.revisions.filter(number=enquiry.current_revision).first()
        form = EditForm(request.POST, revision=current)
    elif action == "assign":
        form = ReassignForm(request.POST)
    else:
        form = ReasonForm(request.POST)
    if not form.is_valid():
        return form_refused(request, form, back)
    if action not in permissions.enquiry_actions(enquiry, user):
        messages.error(
            request, f"You cannot {label} an enquiry that is {enquiry.get_state_display()}."
        )
        return redirect(back)
    reason = form.cleaned_data["reason"]
    if action == "edit":
        fields = form.changed_fields()
        category = form.cleaned_data.get("category")
        if not fields and (category is None or (current and category == current.category)):
            messages.error(request, "Nothing changed: no new revision was made.")
            return redirect(back)

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

    return run(request, back, call, ENQUIRY_DONE[action])
