"""Take it, and one action with one reason for many items (a selection or a whole group).

Each item is still its own action, through the same skeleton as the item's page
(recovery.views.actions.act): the person's permission for that item, the reason rule, the state
check, then the registry's service in its own transaction, which locks the row, checks again
and journals the shared reason. A refusal reads as it does on the item's page. One item refused
does not stop the others; the summary says what happened to each.
"""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

import recovery.messages
from intake.models import Enquiry
from ledger import policies
from ledger.models import Operation
from recovery import ownership, permissions, queue
from recovery.forms import TAKE_REASON, BulkForm, people
from recovery.operator_actions import ASSIGN_PERMISSIONS, ENQUIRY_ACTIONS, OPERATION_ACTIONS
from recovery.views.actions import act
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
from recovery.views.items import ENQUIRY_TARGET
from recovery.words import action_label, group_label

# Items one bulk action may touch: a larger group is acted on oldest first, this many at once.
BULK_LIMIT = 500
# Summaries kept in the session (the newest), so that the results page can be reloaded.
KEPT_SUMMARIES = 5


@require_POST
@console_view
def take_operation(request, op_id):
    """Assign to me, one click: reassign to myself with the reason "taking it"."""
    op = get_operation_for_user(request.user, op_id)
    require(request.user, policies.PERMISSIONS["reassign"], "take an item")
    item = item_url(op)
    back = safe_next(request, f"{item}?op={op.pk}#op-{op.pk}")
    # From the item page the message shows in the card acted on; from the queue, at the top.
    placed = f"at-op-{op.pk}" if back.startswith(item) else ""
    try:
        ownership.reassign_operation(
            op.pk, actor=request.user, reason=TAKE_REASON, owner=request.user
        )
    except REFUSALS as exc:
        messages.error(
            request,
            recovery.messages.NOT_TAKEN % {"reference": op.reference, "why": exc},
            extra_tags=placed,
        )
    else:
        messages.success(
            request,
            recovery.messages.OPERATION_TAKEN % {"reference": op.reference, "action": op.action},
            extra_tags=placed,
        )
    return redirect(back)


@require_POST
@console_view
def take_enquiry(request, reference):
    enquiry = get_enquiry_for_user(request.user, reference)
    if not permissions.can_assign(request.user):
        require(request.user, ASSIGN_PERMISSIONS[0], "take an enquiry")
    item = reverse("recovery:enquiry", args=[reference])
    back = safe_next(request, f"{item}#actions")
    placed = f"at-{ENQUIRY_TARGET}" if back.startswith(item) else ""
    try:
        ownership.assign_enquiry(
            enquiry.pk, actor=request.user, reason=TAKE_REASON, owner=request.user
        )
    except REFUSALS as exc:
        messages.error(
            request,
            recovery.messages.NOT_TAKEN % {"reference": reference, "why": exc},
            extra_tags=placed,
        )
    else:
        messages.success(
            request, recovery.messages.ENQUIRY_TAKEN % {"reference": reference}, extra_tags=placed
        )
    return redirect(back)


def refused_menu(form, user) -> list[tuple[str, str]]:
    """The refused page's actions: only what this person may do, as the queue's menu offers
    (recovery.views.queue.bulk_menu): to at least one ticked item, or, with none ticked (or a
    whole group), what their role lets them do to any item."""
    op_ids, references = [], []
    for value in form.data.getlist("item")[:500]:
        kind, _, key = value.partition(":")
        if kind == "operation":
            try:
                op_ids.append(uuid.UUID(key))
            except ValueError:
                continue
        elif kind == "enquiry" and 0 < len(key) <= 64:
            references.append(key)
    offered = set()
    if op_ids or references:
        for op in Operation.objects.filter(pk__in=op_ids).select_related("enquiry"):
            offered.update(permissions.operation_actions(op, user))
        if references and permissions.can_assign(user):
            offered.add("reassign")
    else:
        offered = {a for a, _ in BulkForm.ACTIONS if user.has_perm(policies.PERMISSIONS[a])}
    return [(value, label) for value, label in BulkForm.ACTIONS if value in offered]


def _selected(form) -> tuple[list[Operation], list[Enquiry], int]:
    """(operations, enquiries, how many more the group held than BULK_LIMIT)."""
    group = form.cleaned_data.get("group")
    if group is not None:
        rows = queue.all_rows(
            timezone.now(), queue.Filters(group=group, sort="age"), limit=BULK_LIMIT + 1
        )
        ids = [row["q_key"] for row in rows]
        over = max(0, len(ids) - BULK_LIMIT)
        ops = Operation.objects.filter(pk__in=ids[:BULK_LIMIT])
        return list(ops.select_related("enquiry").order_by("state_changed_at", "pk")), [], over
    op_ids, references = form.cleaned_data["operations"], form.cleaned_data["enquiries"]
    ops = Operation.objects.filter(pk__in=op_ids).select_related("enquiry")
    enquiries = Enquiry.objects.filter(reference__in=references)
    return (
        list(ops.order_by("state_changed_at", "pk")),
        list(enquiries.order_by("state_changed_at", "pk")),
        0,
    )


def _act(action, subject, user, data) -> tuple[bool, str]:
    """One item, through the single action's skeleton (recovery.views.actions.act): the same
    permission, reason rule, state check, service and journal row, and the same refusal in
    the same words as on the item's page."""
    refusal = act(user, action, subject, data)
    if refusal is None:
        return True, ""
    errors = [e for field in refusal.form.errors.values() for e in field] if refusal.form else []
    return False, refusal.message or " ".join(errors) or str(recovery.messages.BULK_NOT_POSSIBLE)


@require_POST
@console_view
def bulk(request):
    require(request.user, "ledger.view_operation", "act on queue items")
    back = safe_next(request, reverse("recovery:queue"))
    form = BulkForm(request.POST)
    if not form.is_valid():
        # Refused as a whole: the same choices again, what was typed kept, each error naming
        # its field; nothing was done to any item.
        errors = [
            f"{'' if name in ('reason', '__all__') else form.fields[name].label + ': '}{error}"
            for name, field_errors in form.errors.items()
            for error in field_errors
        ]
        return render(
            request,
            "recovery/bulk_refused.html",
            {
                "errors": errors,
                "data": form.data,
                "items": form.data.getlist("item")[:500],
                "back": back,
                "bulk_actions": refused_menu(form, request.user),
                "owners": people(),
            },
            status=422,
        )
    action = form.cleaned_data["action"]
    reason = form.cleaned_data["reason"]
    owner = form.cleaned_data.get("owner")
    user = request.user
    ops, enquiries, over = _selected(form)
    results = []
    # The fields the single action's form takes: the shared reason, and the owner to reassign.
    data = {"reason": reason, "owner": owner.pk if owner else ""}
    for op in ops:
        done, why = _act(OPERATION_ACTIONS[action], op, user, data)
        results.append(
            {
                "reference": op.reference,
                "what": action_label(op.action),
                "url": reverse("recovery:operation", args=[op.pk]),
                "done": done,
                "outcome": str(recovery.messages.BULK_DONE[action]) if done else why,
            }
        )
    for enquiry in enquiries:
        if action == "reassign":
            done, why = _act(ENQUIRY_ACTIONS["assign"], enquiry, user, data)
        else:
            done, why = False, recovery.messages.BULK_NOT_FOR_ENQUIRY % {"action": action}
        results.append(
            {
                "reference": enquiry.reference,
                "what": recovery.messages.BULK_WHAT_ENQUIRY
                % {"state": enquiry.get_state_display()},
                "url": reverse("recovery:enquiry", args=[enquiry.reference]),
                "done": done,
                "outcome": str(recovery.messages.BULK_DONE[action]) if done else why,
            }
        )
    log.info("bulk %s by %s: %d items", action, user, len(results))
    token = uuid.uuid4().hex[:12]
    summary = {
        "action": action,
        "reason": reason,
        "owner": owner.get_username() if owner else "",
        "group": str(form.cleaned_data["group"]) if form.cleaned_data.get("group") else "",
        "over": over,
        "back": back,
        "results": results,
    }
    kept = request.session.get("bulk", {})
    kept = dict(list(kept.items())[-(KEPT_SUMMARIES - 1) :])
    kept[token] = summary
    request.session["bulk"] = kept
    return redirect("recovery:bulk-results", token=token)


@require_GET
@console_view
def bulk_results(request, token):
    summary = request.session.get("bulk", {}).get(token)
    if summary is None:
        # Summaries are kept a while in the session, then gone (410): the journal keeps the rest.
        return render(request, "recovery/bulk_results.html", {"missing": True}, status=410)
    results = summary["results"]
    key = queue.GroupKey.parse(summary["group"]) if summary["group"] else None
    done = sum(1 for r in results if r["done"])
    return render(
        request,
        "recovery/bulk_results.html",
        {
            "summary": summary,
            "results": results,
            "done": done,
            "refused": len(results) - done,
            "action_label": OPERATION_ACTIONS[summary["action"]].label,
            "group_label": group_label(key) if key else "",
        },
    )
