"""No dead end from any unresolved state, whatever a person does from the console.

Issue 27, defect 1: "Cancel safely" on a CRM write whose look-up had found two records left its
enquiry in *submission unknown* with nothing anyone could do but reassign it. This walk starts
from every unresolved state an enquiry and its operations can be in, takes every action the
console offers to any role (each operation's and the enquiry's own, posted to the same URLs
the pages post to, and the bulk menu's), depth-first, each move in a savepoint rolled back
afterwards, and checks in every state reached that the enquiry can still get out: closed, or
its work live (a worker will move it), or some person is offered an action that is not only
Reassign; and that the page never says "Nothing is needed" while something is.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.test import Client
from django.urls import reverse
from django_fsm import TransitionNotAllowed

from intake import services as intake_services
from intake.models import Enquiry, EnquiryState
from ledger import services as ledger_services
from ledger.models import Attempt, JournalEntry, Operation, OperationState
from recovery import explain, permissions
from recovery.forms import BulkForm, ResidentMessageForm
from recovery.operator_actions import ACTIONS

S = EnquiryState
REFUSED = (
    intake_services.ActionRefused,
    ledger_services.ActionRefused,
    PermissionDenied,
    TransitionNotAllowed,
)
ROLES = ("coordinator", "reviewer", "admin")
CRM = "crm.create_enquiry"
DUPLICATES = {"duplicates": ["CRM-1", "CRM-2"]}
# (name, enquiry state, operation state or None, action, attention, result, attempts as
# (kind, outcome)): every way the ledger leaves work for a person, and the demo's one.
STARTS = [
    (
        "reconciling",
        S.SUBMISSION_UNKNOWN,
        OperationState.UNKNOWN,
        CRM,
        "",
        {},
        [("call", "uncertain")],
    ),
    *[
        (
            f"unknown, {attention}",
            S.SUBMISSION_UNKNOWN,
            OperationState.UNKNOWN,
            CRM,
            attention,
            result,
            [("call", "uncertain"), ("lookup", outcome)],
        )
        for attention, result, outcome in [
            ("lookup_unavailable", {}, "lookup_unavailable"),
            ("lookup_failed", {}, "lookup_failed"),
            ("duplicate_records", DUPLICATES, "duplicates"),
            ("reference_not_stored", {"unconfirmed_external_id": "c-9"}, ""),
        ]
    ],
    # The demo's story before this fix: failed with duplicates, the enquiry still unknown.
    (
        "failed duplicates, submission unknown",
        S.SUBMISSION_UNKNOWN,
        OperationState.FAILED,
        CRM,
        "duplicate_records",
        DUPLICATES,
        [("call", "uncertain"), ("lookup", "duplicates")],
    ),
    (
        "failed after no answer, submission unknown",
        S.SUBMISSION_UNKNOWN,
        OperationState.FAILED,
        CRM,
        "retry_budget_exhausted",
        {},
        [("call", "uncertain"), ("call", "transient")],
    ),
    *[
        (
            f"failed, {attention}",
            S.APPROVED,
            OperationState.FAILED,
            CRM,
            attention,
            {},
            [("call", outcome)],
        )
        for attention, outcome in [
            ("retry_budget_exhausted", "transient"),
            ("invalid", "invalid"),
            ("auth", "auth"),
            ("payload_mismatch", "invalid"),
        ]
    ],
    # Checked by hand and retried: queued, the enquiry still submission unknown.
    (
        "retry queued",
        S.SUBMISSION_UNKNOWN,
        OperationState.APPROVED,
        CRM,
        "",
        {},
        [("call", "uncertain")],
    ),
    (
        "acknowledgement failed",
        S.CONFIRMED,
        OperationState.FAILED,
        "notify.send",
        "retry_budget_exhausted",
        {},
        [("call", "transient")],
    ),
    ("needs information", S.NEEDS_INFORMATION, None, None, "", {}, []),
    ("unresolved classification", S.READY_FOR_REVIEW, None, None, "", {}, []),
]
OPEN = (OperationState.UNKNOWN, OperationState.FAILED)
LIVE = (
    OperationState.PROPOSED,
    OperationState.APPROVED,
    OperationState.SUBMITTED,
    OperationState.UNKNOWN,
    OperationState.FAILED,
)


def build(story, start):
    name, enquiry_state, op_state, action, attention, result, attempts = start
    if name == "unresolved classification":
        enquiry = story.enquiry(enquiry_state, category=None)
    else:
        enquiry = story.enquiry(enquiry_state)
    if op_state is not None:
        integration = "notify" if action == "notify.send" else "crm"
        op = story.operation(op_state, enquiry=enquiry, action=action, integration=integration)
        for number, (kind, outcome) in enumerate(attempts, start=1):
            Attempt.objects.create(
                operation=op, number=number, kind=kind, worker="tests", outcome=outcome
            )
        Operation.objects.filter(pk=op.pk).update(
            attention=attention, result=result, attempt_count=len(attempts)
        )
    return enquiry.pk


def operations(enquiry_id):
    return list(
        Operation.objects.filter(enquiry_id=enquiry_id)
        .select_related("enquiry", "integration", "owner")
        .order_by("created_at", "pk")
    )


def signature(enquiry_id):
    enquiry = Enquiry.objects.get(pk=enquiry_id)
    # A message to the resident still on its way (each request for information proposes one)
    # changes no way out of the enquiry: counting it would make every round of "ask, answer,
    # ask again" a new place, and the walk endless. One that failed or is unknown counts.
    return (
        enquiry.state,
        tuple(
            (op.action, op.revision, op.state, op.attention)
            for op in operations(enquiry_id)
            if not (op.action == "notify.send" and op.state not in OPEN)
        ),
    )


def way_out(enquiry_id, people) -> str | None:
    """None when the enquiry can still get out; else what is stuck."""
    enquiry = Enquiry.objects.get(pk=enquiry_id)
    ops = operations(enquiry_id)
    for op in ops:
        if op.state not in OPEN or (op.state == OperationState.UNKNOWN and not op.attention):
            continue  # closed, or a worker moves it (the reconcile is scheduled)
        offered = {a for who in people.values() for a in permissions.operation_actions(op, who)} - {
            "reassign"
        }
        if not offered:
            return f"{op.action} {op.state} ({op.attention}): only Reassign for anyone"
    state = enquiry.state
    crm = [op for op in ops if op.action == CRM and op.revision == enquiry.approved_revision]
    if state in (S.SUBMISSION_UNKNOWN, S.SUBMITTED, S.APPROVED):
        if not any(op.state in LIVE for op in crm):
            return f"{state} with no live CRM write ({[op.state for op in crm]})"
    elif state in (S.READY_FOR_REVIEW, S.NEEDS_INFORMATION):
        offered = {
            a for who in people.values() for a in permissions.enquiry_actions(enquiry, who)
        } - {"assign"}
        if not offered:
            return f"{state}: nobody may act on it"
    elif state not in (S.CONFIRMED, S.REJECTED):
        return f"unexpected state {state}"
    journal = list(JournalEntry.objects.filter(enquiry=enquiry).order_by("at", "id"))
    answers = explain.answers(enquiry, ops, journal)
    waiting = state not in (S.CONFIRMED, S.REJECTED) or any(op.state in OPEN for op in ops)
    if waiting and answers.safe == ["Nothing is needed from a person right now."]:
        return f"{state}: the page says nothing is needed"
    return None


def said_before(op) -> str | None:
    """Cancel says, before the click, what becomes of the enquiry."""
    words = explain.cancel_help(op)
    if "Rejected" not in words and "stays" not in words:
        return f"Cancel on {op.action} ({op.enquiry.state}) says nothing of the enquiry: {words!r}"
    return None


def offered(enquiry_id, people):
    """(role, operation or None, action, its form's fields) for every action the console offers
    anyone now, Reassign included; edits are tests/ledger/test_revision_walk.py's walk."""
    enquiry = Enquiry.objects.get(pk=enquiry_id)
    found = []
    for role, who in people.items():
        for op in operations(enquiry_id):
            for action in permissions.operation_actions(op, who):
                data = {"reason": f"{role} {action}"}
                if action == "complete_by_hand":
                    data["external_id"] = "CRM-HAND-1"
                if action == "reassign":
                    data["owner"] = people["admin"].pk
                found.append((role, op, action, data))
        for action in permissions.enquiry_actions(enquiry, who):
            if action != "edit":
                data = {"reason": f"{role} {action}"}
                if action == "assign":
                    data["owner"] = people["admin"].pk
                if ACTIONS[action].form is ResidentMessageForm:
                    # What the resident reads: without it the action is refused, and an
                    # enquiry with no category (which cannot be approved) has no way out.
                    data["resident_message"] = f"{role} {action}: words for the resident"
                found.append((role, None, action, data))
    return found


def by_service(enquiry_id, people, role, op, action, data):
    fields = dict(data)
    if "owner" in fields:
        fields["owner"] = people["admin"]
    if op is not None:
        return lambda: ACTIONS[action].service(op.pk, actor=people[role], **fields)
    return lambda: ACTIONS[action].service(enquiry_id, actor=people[role], **fields)


def by_page(enquiry, clients, role, op, action, data, *, bulk=False):
    """The same action posted where a person posts it: its form, or the queue's bulk menu."""
    client = clients[role]
    if bulk:
        url, data = (
            reverse("recovery:bulk"),
            {"action": action, "item": f"operation:{op.pk}", **data},
        )
    elif op is not None:
        segment = {"complete_by_hand": "complete"}.get(action, action)
        url = reverse(f"recovery:op-{segment}", args=[op.pk])
    else:
        segment = action.replace("_", "-").replace("approve-revision", "approve")
        url = reverse(f"recovery:enquiry-{segment}", args=[enquiry.reference])

    def post():
        response = client.post(url, data)
        assert response.status_code < 500, f"{url}: {response.status_code}"

    return post


@pytest.mark.parametrize("start", STARTS, ids=[s[0] for s in STARTS])
def test_no_action_from_an_unresolved_state_leaves_a_dead_end(story, people, start):
    enquiry_id = build(story, start)
    clients = {}
    for role, who in people.items():
        clients[role] = Client()
        clients[role].force_login(who)
    seen: set = set()
    stuck: list[str] = []
    taken: list[str] = []
    resolved: list[str] = []

    def walk(path):
        key = signature(enquiry_id)
        if key in seen:
            return
        seen.add(key)
        problem = way_out(enquiry_id, people)
        if problem:
            stuck.append(f"{' -> '.join(path) or 'start'}: {problem}")
            return
        enquiry = Enquiry.objects.get(pk=enquiry_id)
        if enquiry.state in (S.CONFIRMED, S.REJECTED) and not any(
            op.state in OPEN for op in operations(enquiry_id)
        ):
            # Resolved: what follows (a compensation of a confirmed write, proposed, cancelled
            # and proposed again) is new work, not a way out of this.
            resolved.append(" -> ".join(path))
            return
        for role, op, action, data in offered(enquiry_id, people):
            name = f"{role} {action}" + (f" {op.action}" if op else "")
            if action == "cancel":
                problem = said_before(op)
                if problem:
                    stuck.append(f"{' -> '.join(path) or 'start'}: {problem}")
            calls = [(name, by_service(enquiry_id, people, role, op, action, data))]
            if not path:
                # The first step also through the pages: the form, and the bulk menu's.
                calls.append((f"{name} (page)", by_page(enquiry, clients, role, op, action, data)))
                if op is not None and action in dict(BulkForm.ACTIONS):
                    calls.append(
                        (
                            f"{name} (bulk)",
                            by_page(enquiry, clients, role, op, action, data, bulk=True),
                        )
                    )
            for label, call in calls:
                point = transaction.savepoint()
                try:
                    call()
                except REFUSED:
                    transaction.savepoint_rollback(point)
                    continue
                taken.append(label)
                walk([*path, label])
                transaction.savepoint_rollback(point)

    walk([])
    assert not stuck, "\n".join(stuck)
    assert seen and taken, "the walk took no step"
    assert resolved, "no way out was found at all"
