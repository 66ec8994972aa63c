"""The item page: one enquiry and all its operations, answered in plain words."""

from django.contrib import messages
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

import ledger.messages
from intake import quoted
from intake.models import Category, IntakeEvent
from intake.services import customer_matches
from ledger import policies
from ledger import services as ledger_services
from ledger.execution import retrying
from ledger.models import Action, Attempt, JournalEntry, Operation, OperationState
from recovery import explain, ownership, permissions, reconciling, refused, story
from recovery.forms import EditForm, people
from recovery.operator_actions import ACTIONS
from recovery.views.common import (
    REFUSALS,
    console_view,
    get_enquiry_for_user,
    get_operation_for_user,
    require,
)
from recovery.views.documents import documents_context
from recovery.views.queue import record_visit
from recovery.words import action_label

# Console action -> its URL segment (recovery/urls.py names them op-<segment>, enquiry-<segment>).


def _visited(journal, subject_type, subject_id=None):
    states = set()
    for row in journal:
        if row.subject_type == subject_type and (
            subject_id is None or row.subject_id == subject_id
        ):
            states.update(s for s in (row.from_state, row.to_state) if s)
    return states


# Where a message about an enquiry-level action is shown (the Decide / actions card).
ENQUIRY_TARGET = "enquiry"


def _locked_actions(op, allowed):
    """Actions the state allows that this person may not take, with who may, in words.

    Retry is not offered at all (locked or not) where the page says not to retry: a refusal as
    invalid, refused credentials, duplicates (explain.retry_advised).
    """
    try:
        possible = policies.state_allows(op)
    except KeyError:
        return []
    locked = []
    for action in possible:
        if action in allowed:
            continue
        if action == "retry" and not explain.retry_advised(op):
            continue
        who = ledger.messages.holders(policies.permission_for(op, action))
        if action == "cancel" and op.ends_enquiry():
            why = f"it ends the enquiry: only {who} may"
        else:
            why = f"only {who} may"
        locked.append((action, why))
    return locked


# The operation actions a safe next step can be (explain.safe_steps): when the person cannot
# take it, handing the item to someone who can is their main action.
SAFE_ACTIONS = ("retry", "complete_by_hand", "reconcile", "cancel")


def handoff(op, user):
    """When this person owns the work (or nobody in person does) but cannot take the step "Safe
    now" names: that step, and the person to hand it to (the queue's backup owner, the
    integration's owner, else the first admin who may), for a reassign form shown open and
    pre-filled. None otherwise: where the person's own action is the safe step (Reconcile now),
    and where someone else already owns it."""
    if "reassign" not in op.allowed:
        return None
    owner = op.effective_owner.user
    if owner is not None and owner.pk != user.pk:
        return None
    steps = [a for a in explain.safe_steps(op) if a in SAFE_ACTIONS and a != "cancel"]
    if not steps:
        return None
    locked = [a for a in steps if a in dict(op.locked)]
    if not locked:
        return None
    action = locked[0]
    permission = policies.permission_for(op, action)
    candidates = [
        op.policy.backup_owner if op.policy else None,
        op.integration.owner if op.integration else None,
        *ownership.admins(),
    ]
    to = next(
        (
            u
            for u in candidates
            if u is not None and u.is_active and u.pk != user.pk and u.has_perm(permission)
        ),
        None,
    )
    if to is None:
        return None
    label = ACTIONS[action].label.lower()
    return {
        "action": action,
        "label": label,
        "to": to,
        "reason": f"needs {to.get_username()} to {label}: I may not",
        "url": reverse(f"recovery:op-{ACTIONS['reassign'].segment}", args=[op.pk]),
    }


def _placed_messages(request):
    """Messages for one card ("at-<target>" tags): shown in that card, not at the page top."""
    placed = {}
    for message in messages.get_messages(request):
        tags = message.extra_tags or ""
        if tags.startswith("at-"):
            placed.setdefault(tags.removeprefix("at-"), []).append(message)
    return placed


def decorate(op, user, journal, *, bound=None, placed=None):
    """What the op card shows: actions, runbook, plain words, owner, reconcile progress."""
    op.allowed = permissions.operation_actions(op, user)
    op.locked = _locked_actions(op, op.allowed)
    op.runbook = explain.runbook_for_operation(op)
    op.runbook_title = explain.RUNBOOKS.get(op.runbook or "")
    op.visited = _visited(journal, "ledger.operation", str(op.pk))
    op.system = explain.system_name(op)
    op.explain_changed = explain.external_change(op)
    op.records = explain.records_at_destination(op)
    # When the evidence behind "why a person is needed" was observed (a 501 an hour old reads
    # differently from one a second old).
    op.attention_seen = explain.seen_at(explain.last_lookup(op) or explain.last_attempt(op))
    op.explain_safe = explain.safe_now(op)
    # Not sent yet and waiting for its next try: until when it is tried before a person is.
    op.retry_until = (
        retrying.window_end(op)
        if op.state == OperationState.APPROVED
        and op.last_error_class == "transient"
        and op.next_attempt_at
        else None
    )
    op.journal = [row for row in journal if row.subject_id == str(op.pk)]
    op.reconcile_status = reconciling.reconcile_status(op, op.journal)
    op.polling = bool(
        (op.reconcile_status and op.reconcile_status.pending)
        or op.state == OperationState.SUBMITTED
    )
    queue = ownership.operation_queue(op)
    op.policy = ownership.policy_for(queue, op.integration_id) if queue else None
    op.due = ownership.due(op.state_changed_at, op.policy)
    op.effective_owner = (
        ownership.effective_owner(op.owner, op.policy, op.journal, queue=queue)
        if queue
        else ownership.Owner(None, "", queued=False)
    )
    op.help = {
        "reconcile": explain.reconcile_help(op),
        "cancel": explain.cancel_help(op),
    }
    op.cancel_label = explain.cancel_label(op)
    # Cancelling it closes the enquiry: its form asks for the message to the resident.
    op.closes_enquiry = op.ends_enquiry()
    op.forms = [
        {
            "action": a,
            "url": reverse(f"recovery:op-{ACTIONS[a].segment}", args=[op.pk]),
            "help": op.help.get(a, ""),
        }
        for a in op.allowed
    ]
    op.handoff = handoff(op, user)
    target = f"op-{op.pk}"
    op.target = target
    op.bound = bound if bound and bound["target"] == target else None
    op.messages = (placed or {}).get(target, [])
    return op


def item_context(request, enquiry, *, bound=None):
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
    placed = _placed_messages(request)
    for op in operations:
        decorate(op, user, journal, bound=bound, placed=placed)
    enquiry_runbook = explain.runbook_for_enquiry(enquiry, operations)
    enquiry_actions = permissions.enquiry_actions(enquiry, user)
    queue = ownership.enquiry_queue(enquiry)
    policy = ownership.policy_for(queue) if queue else None
    enquiry_owner = ownership.effective_owner(
        enquiry.owner,
        policy,
        [r for r in journal if r.subject_type == "intake.enquiry"],
        queue=queue,
    )
    # Waiting on its CRM write, the enquiry is that write's row in the queue: one item, one
    # owner (the write's), and it is reassigned there. Out of every queue itself, an enquiry
    # whose other work is in one (a failed acknowledgement) shows that work's owner: the page
    # names the one owner the queue row names.
    queued = [
        op for op in operations if op.state in (OperationState.UNKNOWN, OperationState.FAILED)
    ]
    delivering = next(
        (op for op in reversed(queued) if op.action == Action.CREATE_ENQUIRY),
        None,
    )
    if delivering is None and not enquiry_owner.queued and queued:
        delivering = queued[0]
    for op in operations:
        if refused.refused_as_invalid(op):
            op.explain_safe = refused.safe_now(op, enquiry_actions)
    if delivering is not None:
        of = action_label(delivering.action)
        enquiry_owner = ownership.Owner(
            delivering.effective_owner.user,
            f"{delivering.effective_owner.why}; owner of its step “{of}”",
            to_admins=delivering.effective_owner.to_admins,
        )
        enquiry_actions = [a for a in enquiry_actions if a != "assign"]
    return {
        "enquiry": enquiry,
        "revision": current,
        "revisions": revisions,
        "operations": operations,
        "journal": journal,
        "suggestions": list(enquiry.suggestions.select_related("category")[:5]),
        "fields": readable_fields(current),
        "documents": documents_context(enquiry, user, bound, placed),
        "event": IntakeEvent.objects.filter(enquiry=enquiry).first(),
        "answers": explain.answers(enquiry, operations, journal, revision=current),
        "enquiry_actions": enquiry_actions,
        "enquiry_policy": policy,
        "enquiry_due": ownership.due(enquiry.state_changed_at, policy),
        "enquiry_forms": {
            a: reverse(f"recovery:enquiry-{ACTIONS[a].segment}", args=[enquiry.reference])
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
        # Why Approve is not offered yet: a field the CRM requires is missing (its words).
        "approve_blocked": (
            ledger_services.not_ready_to_approve(enquiry, current)
            if "approve_revision" in enquiry_actions
            else ""
        ),
        "enquiry_bound": bound if bound and bound["target"] == ENQUIRY_TARGET else None,
        "enquiry_messages": placed.get(ENQUIRY_TARGET, []),
        "enquiry_owner": enquiry_owner,
        "outcome": explain.outcome(enquiry, journal),
        "story": story.tell(
            enquiry,
            operations,
            journal,
            owner=enquiry_owner,
            due=delivering.due if delivering else ownership.due(enquiry.state_changed_at, policy),
            now=timezone.now(),
        ),
        "messages_placed": True,
    }


FIELD_LABELS = {"service_hint": "service asked for"}


def readable_fields(revision) -> list[tuple[str, str]]:
    """A revision's fields (the message aside) as people read them: the web form's service
    hint is a slug ("bins-waste"); it is shown as the category it names, or in words."""
    if revision is None:
        return []
    rows = []
    for key, value in revision.fields.items():
        if key == "message":
            continue
        text = "" if value is None else str(value)
        if key == "service_hint" and text:
            category = Category.objects.filter(slug=text).first()
            words = category.name if category else text.replace("-", " ").replace("_", " ")
            text = f"{words[:1].upper()}{words[1:]} (the form sent “{text}”)"
        rows.append((FIELD_LABELS.get(key, key.replace("_", " ")), text))
    return rows


def revision_diff(revisions, number):
    """Revision ``number`` against the one before, field by field (category included): a list
    of (field, before, after, changed), and the two revisions. The first revision has nothing
    before it: every field is shown as new."""
    by_number = {r.number: r for r in revisions}
    current, previous = by_number.get(number), by_number.get(number - 1)
    if current is None:
        return None
    before = dict(previous.fields) if previous else {}
    after = dict(current.fields)
    before["category"] = str(previous.category) if previous and previous.category else ""
    after["category"] = str(current.category) if current.category else ""
    names = ["category", *sorted((set(before) | set(after)) - {"category", "message"})]
    if "message" in before or "message" in after:
        names.append("message")  # the longest last
    rows = []
    for name in names:
        old, new = before.get(name, ""), after.get(name, "")
        rows.append(
            {
                "field": name.replace("_", " "),
                "before": "" if old is None else str(old),
                "after": "" if new is None else str(new),
                "changed": previous is not None and old != new,
            }
        )
    rows.sort(key=lambda row: not row["changed"])  # what changed first, as a diff reads
    return {"rows": rows, "current": current, "previous": previous}


def _queues_shown(enquiry, context) -> list[str]:
    """The queues whose items this page showed to someone who may act on them: they count as
    looked at (the dashboard's "Last opened"), as on the queue page (inspected_queues)."""
    queues = set()
    if context["enquiry_actions"]:
        queues.add(ownership.enquiry_queue(enquiry))
    for op in context["operations"]:
        if getattr(op, "allowed", None):
            queues.add(ownership.operation_queue(op))
    return sorted(q for q in queues if q)


def render_item(request, enquiry, *, page="item", bound=None, edit_form=None, status=200):
    """The item page (or the review page) of ``enquiry``; ``bound``: a refused form to show
    again, open, with what was typed and its errors (recovery.views.actions.refused)."""
    context = item_context(request, enquiry, bound=bound)
    record_visit(request.user, _queues_shown(enquiry, context))
    context["edit_form"] = edit_form or EditForm(revision=context["revision"])
    context["nav"] = "review" if page == "review" else "enquiries"
    if bound:
        context["preselect"] = bound["action"]
    template = "recovery/item.html"
    if page == "review":
        template = "recovery/review_item.html"
        context["diff"] = revision_diff(context["revisions"], enquiry.current_revision)
        context["slots"] = (
            ledger_services.slots_view(enquiry) if ledger_services.needs_visit(enquiry) else None
        )
        context["quoted"] = quoted.quoted_open_enquiry(enquiry)
        context["resident_answers"] = enquiry.answers.prefetch_related("files").order_by(
            "received_at"
        )
        context["suggestion"] = next(
            (s for s in context["suggestions"] if s.revision == enquiry.current_revision),
            context["suggestions"][0] if context["suggestions"] else None,
        )
    return render(request, template, context, status=status)


@require_GET
@console_view
def enquiry_detail(request, reference):
    enquiry = get_enquiry_for_user(request.user, reference)
    return render_item(request, enquiry)


@require_GET
@console_view
def operation_card(request, op_id):
    """One operation's card alone: htmx polls it while a reconcile or a call is in flight, and
    swaps it in place when the outcome is recorded. Once the card stops polling its answer is
    the whole item page: the outcome changes the header, the story, "What happened", the
    Owner / Response due / Runbook box, the lifecycle, the fields and the journal too, and the
    card's hx-select-oob swaps every one of those from it."""
    op = get_operation_for_user(request.user, op_id)
    if op.enquiry_id is None:
        return redirect("recovery:operation", op_id=op.pk)  # its own page has no cards
    context = item_context(request, op.enquiry)
    card = next((o for o in context["operations"] if o.pk == op.pk), None)
    if card is None:  # gone between the two reads
        raise Http404
    if not card.polling:
        return render_item(request, op.enquiry)
    return render(request, "recovery/_op_card.html", {**context, "op": card})


@require_GET
@console_view
def operation_detail(request, op_id):
    op = get_operation_for_user(request.user, op_id)
    if op.enquiry_id is None:
        return _enquiryless(request, op)
    url = reverse("recovery:enquiry", args=[op.enquiry.reference])
    action = request.GET.get("action", "")
    suffix = f"&action={action}" if action.isidentifier() else ""
    return redirect(f"{url}?op={op.pk}{suffix}#op-{op.pk}")


def _enquiryless(request, op):
    """A message to an operator: no enquiry, so its own page: what it is, its attempts, its
    journal, and what a person may do (retry, complete by hand, cancel)."""
    from ledger.models import JournalEntry
    from recovery.explain import runbook_for_operation
    from recovery.permissions import operation_actions

    context = {
        "op": op,
        "attempts": list(op.attempts.all()),
        "journal": JournalEntry.objects.filter(
            subject_type="ledger.operation", subject_id=str(op.pk)
        ),
        "allowed": [
            (ACTIONS[a].label, a, reverse(f"recovery:op-{ACTIONS[a].segment}", args=[op.pk]))
            for a in operation_actions(op, request.user)
            if a in ("retry", "complete_by_hand", "cancel")
        ],
        "runbook": runbook_for_operation(op),
        # Waiting for its next try (e-mail's retry window): until when, before a person.
        "retry_until": retrying.window_end(op)
        if op.state == OperationState.APPROVED and op.next_attempt_at
        else None,
    }
    return render(request, "recovery/operator_message.html", context)


@require_GET
@console_view
def review_detail(request, reference):
    require(request.user, "intake.review_enquiry", "review enquiries")
    enquiry = get_enquiry_for_user(request.user, reference)
    return render_item(request, enquiry, page="review")


@require_POST
@console_view
def attach_as_reply(request, reference):
    """One click, with a reason: this new enquiry is a reply to the open one it quotes."""
    require(request.user, "intake.review_enquiry", "review enquiries")
    enquiry = get_enquiry_for_user(request.user, reference)
    try:
        target = quoted.attach_as_reply(
            enquiry.pk,
            target_reference=request.POST.get("target", ""),
            actor=request.user,
            reason=request.POST.get("reason"),
        )
    except REFUSALS as exc:
        # The review page again (422), the offer still open, nothing changed.
        messages.error(request, f"Not attached: {exc}")
        return render_item(request, enquiry, page="review", status=422)
    messages.success(
        request, f"{reference} is attached to {target.reference} as a reply and closed."
    )
    return redirect("recovery:review-item", reference=target.reference)
