"""The item page: one enquiry and all its operations, answered in plain words."""

from django.db.models import Prefetch
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from intake.models import IntakeEvent
from intake.services import customer_matches
from ledger import policies
from ledger.models import Attempt, JournalEntry, Operation
from recovery import explain, ownership, permissions
from recovery.forms import EditForm, people
from recovery.views.common import (
    console_view,
    get_enquiry_for_user,
    get_operation_for_user,
    require,
)
from recovery.words import OPERATOR_ACTIONS

# Console action -> its URL segment (recovery/urls.py names them op-<segment>, enquiry-<segment>).
OP_SEGMENTS = {
    "reconcile": "reconcile",
    "retry": "retry",
    "complete_by_hand": "complete",
    "cancel": "cancel",
    "compensate": "compensate",
    "approve": "approve",
    "reassign": "reassign",
}
ENQUIRY_SEGMENTS = {
    "approve_revision": "approve",
    "edit": "edit",
    "request_information": "request-information",
    "information_received": "information-received",
    "reject": "reject",
    "assign": "assign",
}


def _visited(journal, subject_type, subject_id=None):
    states = set()
    for row in journal:
        if row.subject_type == subject_type and (
            subject_id is None or row.subject_id == subject_id
        ):
            states.update(s for s in (row.from_state, row.to_state) if s)
    return states


def _locked_actions(op, allowed):
    """Actions the state allows that this person may not take, with the reason why."""
    try:
        possible = policies.state_allows(op)
    except KeyError:
        return []
    return [
        (action, "needs the recovery permission (an admin can grant it)")
        if OPERATOR_ACTIONS.get(action, ("", False))[1]
        else (action, "needs a coordinator")
        for action in possible
        if action not in allowed
    ]


def item_context(request, enquiry):
    user = request.user
    revisions = list(
        enquiry.revisions.select_related("created_by", "approved_by", "category").order_by("number")
    )
    current = next((r for r in revisions if r.number == enquiry.current_revision), None)
    operations = list(
        Operation.objects.filter(enquiry=enquiry)
        .select_related("integration", "owner", "compensates", "enquiry")
        .prefetch_related(Prefetch("attempts", queryset=Attempt.objects.order_by("number")))
        .order_by("created_at", "pk")
    )
    journal = list(
        JournalEntry.objects.filter(enquiry=enquiry)
        .select_related("actor_user")
        .order_by("at", "id")
    )
    for op in operations:
        op.allowed = permissions.operation_actions(op, user)
        op.locked = _locked_actions(op, op.allowed)
        op.runbook = explain.runbook_for_operation(op)
        op.runbook_title = explain.RUNBOOKS[op.runbook]
        op.visited = _visited(journal, "ledger.operation", str(op.pk))
        op.explain_changed = explain.external_change(op)
        op.explain_safe = explain.safe_now(op)
        op.journal = [row for row in journal if row.subject_id == str(op.pk)]
        queue = ownership.operation_queue(op)
        op.policy = ownership.policy_for(queue, op.integration_id) if queue else None
        op.due = ownership.due(op.state_changed_at, op.policy)
        op.forms = [
            {"action": a, "url": reverse(f"recovery:op-{OP_SEGMENTS[a]}", args=[op.pk])}
            for a in op.allowed
        ]
    enquiry_runbook = explain.runbook_for_enquiry(enquiry)
    enquiry_actions = permissions.enquiry_actions(enquiry, user)
    queue = ownership.enquiry_queue(enquiry)
    policy = ownership.policy_for(queue) if queue else None
    return {
        "enquiry": enquiry,
        "revision": current,
        "revisions": revisions,
        "operations": operations,
        "journal": journal,
        "suggestions": list(enquiry.suggestions.select_related("category")[:5]),
        "documents": list(enquiry.attached.all()),
        "event": IntakeEvent.objects.filter(enquiry=enquiry).first(),
        "answers": explain.answers(enquiry, operations, journal, revision=current),
        "enquiry_actions": enquiry_actions,
        "enquiry_policy": policy,
        "enquiry_due": ownership.due(enquiry.state_changed_at, policy),
        "enquiry_forms": {
            a: reverse(f"recovery:enquiry-{ENQUIRY_SEGMENTS[a]}", args=[enquiry.reference])
            for a in enquiry_actions
        },
        "enquiry_visited": _visited(journal, "intake.enquiry"),
        "enquiry_runbook": enquiry_runbook,
        "enquiry_runbook_title": explain.RUNBOOKS.get(enquiry_runbook or ""),
        "matches": list(customer_matches(enquiry)[:10]),
        "owners": people(),
        "focus": request.GET.get("op", ""),
        "now": timezone.now(),
        "preselect": request.GET.get("action", ""),
        "edited_by_me": bool(current and current.created_by_id == user.pk),
    }


@require_GET
@console_view
def enquiry_detail(request, reference):
    enquiry = get_enquiry_for_user(request.user, reference)
    context = item_context(request, enquiry)
    context["edit_form"] = EditForm(revision=context["revision"])
    return render(request, "recovery/item.html", context)


@require_GET
@console_view
def operation_detail(request, op_id):
    op = get_operation_for_user(request.user, op_id)
    url = reverse("recovery:enquiry", args=[op.enquiry.reference])
    action = request.GET.get("action", "")
    suffix = f"&action={action}" if action.isidentifier() else ""
    return redirect(f"{url}?op={op.pk}{suffix}#op-{op.pk}")


@require_GET
@console_view
def review_detail(request, reference):
    require(request.user, "intake.review_enquiry", "review enquiries")
    enquiry = get_enquiry_for_user(request.user, reference)
    context = item_context(request, enquiry)
    context["edit_form"] = EditForm(revision=context["revision"])
    context["suggestion"] = next(
        (s for s in context["suggestions"] if s.revision == enquiry.current_revision),
        context["suggestions"][0] if context["suggestions"] else None,
    )
    return render(request, "recovery/review_item.html", context)
