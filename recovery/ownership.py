"""Which queue an item is in, and which response policy (owner, period) applies to it.

The queue computes the same once per branch of its SQL (recovery.queue.policies.Policies); this
is the Python side for one item at a time: the item page and the escalation task.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, F, Q, Value, When

from intake.models import EnquiryState
from intake.residentmodels import ResidentAnswer
from ledger.models import Action, OperationState
from ledger.receipt import FAILURES_FOR_A_PERSON
from recovery import messages
from recovery.models import Queue, ResponsePolicy


def policy_for(queue: str, integration_id=None) -> ResponsePolicy | None:
    return (
        ResponsePolicy.objects.filter(
            Q(queue=queue) | Q(queue=""),
            Q(integration_id=integration_id) | Q(integration__isnull=True),
        )
        .select_related("owner", "backup_owner")
        .order_by(
            Case(When(queue="", then=Value(1)), default=Value(0)),
            F("integration_id").asc(nulls_last=True),
        )
        .first()
    )


def operation_queue(op) -> str | None:
    return op.state if op.state in (OperationState.UNKNOWN, OperationState.FAILED) else None


def enquiry_queue(enquiry) -> str | None:
    if enquiry.receipt_pending and enquiry.receipt_failures >= FAILURES_FOR_A_PERSON:
        return Queue.RECEIPT_FAILING
    if enquiry.state in (EnquiryState.NEEDS_INFORMATION, EnquiryState.SUBMISSION_UNKNOWN):
        return enquiry.state
    if enquiry.state == EnquiryState.READY_FOR_REVIEW:
        return Queue.UNRESOLVED if enquiry.category_id is None else Queue.REVIEW
    return None


def due(since, policy):
    return since + policy.response_period if policy and since else None


@dataclass
class Owner:
    """Who owns an item now, and why: given to them (by a person or by escalation, with who,
    when and why), the owner of the queue it is in, or, where no owner is set, the admins.

    ``user`` is None in two cases: the item is in no queue (``queued`` False: nobody needs to
    act), or its queue has no owner (``to_admins``: it falls to every admin, and says so).
    """

    user: object
    why: str
    to_admins: bool = False
    queued: bool = True

    @property
    def label(self) -> str:
        if self.user is not None:
            return self.user.get_username()
        return str(messages.OWNER_ADMINS) if self.to_admins else str(messages.OWNER_NOT_QUEUED)

    def people(self) -> list:
        """Who is told about it: the owner, or every admin when it falls to them."""
        if self.user is not None:
            return [self.user]
        return admins() if self.to_admins else []


HANDOVER_ACTIONS = (
    "recovery.operation.reassigned",
    "intake.enquiry.assigned",
    "recovery.escalated",
)


def admins() -> list:
    """The people an unowned item falls to: active members of the admin role, and superusers."""
    from django.contrib.auth import get_user_model

    return list(
        get_user_model()
        .objects.filter(Q(groups__name="admin") | Q(is_superuser=True), is_active=True)
        .distinct()
        .order_by("username")
    )


def queue_label(queue) -> str:
    try:
        return str(Queue(queue).label)
    except ValueError:
        return str(queue or "")


def owner_why(direct: bool, journal=(), queue=None) -> str:
    """Why the owner owns it: "owns the “Operation failed” queue", "assigned by casey at ...:
    “reason”", or "escalated from coordinator at ..., overdue" (from the latest hand-over in
    ``journal``, whoever made it, the system included)."""
    from recovery import timefmt

    if not direct:
        return (
            str(messages.OWNER_OF_QUEUE % {"queue": queue_label(queue)})
            if queue
            else str(messages.OWNER_OF_ITS_QUEUE)
        )
    given = next((r for r in reversed(list(journal)) if r.action in HANDOVER_ACTIONS), None)
    if given is None:
        return str(messages.OWNER_GIVEN_UNRECORDED)
    at = timefmt.local(given.at)
    if given.actor.startswith("system:") and "overdue" in (given.reason or ""):
        earlier = (given.evidence or {}).get("from") or "the queue's owner"
        return str(messages.OWNER_ESCALATED % {"earlier": earlier, "at": at})
    reason = " ".join((given.reason or "").split())
    if len(reason) > 80:
        reason = reason[:79] + "…"
    return str(
        messages.OWNER_ASSIGNED
        % {"who": given.actor.removeprefix("user:"), "at": at, "reason": reason or "—"}
    )


def effective_owner(owner, policy, journal=(), *, queue=None) -> Owner:
    """The one owner the queue row, the card, the item page, the Enquiries list and every
    message about the item show: the person the item was given to (by hand or by escalation),
    else the owner of the queue it is in, else the admins (no item is owned by nobody).

    ``policy`` is the response policy of the item's queue (``policy_for``), None when none
    applies; pass ``queue`` (the item's queue key, None when it is in no queue) so the words
    can name it and an item in no queue is not sent to the admins.
    """
    if owner is not None:
        return Owner(owner, owner_why(True, journal))
    if policy is not None and policy.owner_id:
        return Owner(policy.owner, owner_why(False, queue=queue or policy.queue))
    if queue is None and policy is None:
        return Owner(None, "", queued=False)
    return Owner(
        None, str(messages.OWNER_FALLS_TO_ADMINS % {"queue": queue_label(queue)}), to_admins=True
    )


def item_owner(subject, journal=()) -> Owner:
    """The effective owner of one operation or enquiry as it is now (the item page, the
    escalation task, e-mail to owners). An enquiry waiting on a CRM write in the queue is that
    write's row, so it has that write's owner."""
    from ledger.models import Operation

    if isinstance(subject, Operation):
        queue = operation_queue(subject)
        if queue is None:
            return Owner(subject.owner if subject.owner_id else None, "", queued=False)
        policy = policy_for(queue, subject.integration_id)
        return effective_owner(subject.owner, policy, journal, queue=queue)
    if isinstance(subject, ResidentAnswer):
        if not subject.waiting:
            return Owner(subject.owner if subject.owner_id else None, "", queued=False)
        queue = Queue.WAITING_REPLY
        return effective_owner(subject.owner, policy_for(queue), journal, queue=queue)
    queue = enquiry_queue(subject)
    if queue is None:
        return Owner(subject.owner if subject.owner_id else None, "", queued=False)
    return effective_owner(subject.owner, policy_for(queue), journal, queue=queue)


def latest_handovers(subjects) -> dict:
    """(subject_type, subject_id) -> its latest hand-over journal row, in one query (the queue
    page shows why each owner owns its row without a query per row)."""
    from ledger.models import JournalEntry

    subjects = list(subjects)
    if not subjects:
        return {}
    condition = Q()
    for subject_type, subject_id in subjects:
        condition |= Q(subject_type=subject_type, subject_id=subject_id)
    rows = (
        JournalEntry.objects.filter(condition, action__in=HANDOVER_ACTIONS)
        .order_by("subject_type", "subject_id", "-at", "-id")
        .distinct("subject_type", "subject_id")
    )
    return {(r.subject_type, r.subject_id): r for r in rows}


def attach_owners(enquiries) -> None:
    """Set ``effective_owner`` on each enquiry of a list (the Enquiries page): the owner its
    queue row names, in a constant number of queries whatever the rows (the policies, the
    enquiries' operations in a queue, their owners, their latest hand-overs)."""
    from django.contrib.auth import get_user_model

    from ledger.models import Operation
    from recovery.queue.policies import Policies

    enquiries = list(enquiries)
    if not enquiries:
        return
    policies = Policies.load()
    queued_ops: dict = {}
    for op in (
        Operation.objects.filter(
            enquiry_id__in=[e.pk for e in enquiries],
            state__in=(OperationState.UNKNOWN, OperationState.FAILED),
        )
        .select_related("owner")
        .order_by("created_at", "pk")
    ):
        mine = queued_ops.setdefault(op.enquiry_id, [])
        # Its CRM write first (that is the enquiry's row), else its oldest other work.
        if op.action == Action.CREATE_ENQUIRY:
            mine.insert(0, op)
        else:
            mine.append(op)
    chosen = {}
    for enquiry in enquiries:
        queue = enquiry_queue(enquiry)
        ops = queued_ops.get(enquiry.pk, [])
        op = ops[0] if ops and (queue is None or ops[0].action == Action.CREATE_ENQUIRY) else None
        if op is not None:
            queue = operation_queue(op)
            chosen[enquiry.pk] = ("ledger.operation", op, queue, op.integration_id)
        elif queue is not None:
            chosen[enquiry.pk] = ("intake.enquiry", enquiry, queue, None)
    direct = [(t, str(s.pk)) for t, s, _q, _i in chosen.values() if s.owner_id]
    given = latest_handovers(direct)
    owner_ids = {policies.value(q, i, "owner_id") for _t, _s, q, i in chosen.values()}
    users = get_user_model().objects.in_bulk([u for u in owner_ids if u])
    for enquiry in enquiries:
        if enquiry.pk not in chosen:
            enquiry.effective_owner = Owner(None, "", queued=False)
            continue
        subject_type, subject, queue, integration_id = chosen[enquiry.pk]
        if subject.owner_id:
            row = given.get((subject_type, str(subject.pk)))
            enquiry.effective_owner = Owner(subject.owner, owner_why(True, [row] if row else []))
            continue
        policy_owner = users.get(policies.value(queue, integration_id, "owner_id"))
        if policy_owner is not None:
            enquiry.effective_owner = Owner(policy_owner, owner_why(False, queue=queue))
        else:
            enquiry.effective_owner = effective_owner(None, None, queue=queue)


def reassign_operation(op_id, *, actor, reason, owner):
    """Reassign an operation, the owner its queue's policy gave it said as the one it came
    from (the queue page's "changed owner" notice reads the hand-over's "from")."""
    from ledger import services
    from ledger.models import Operation

    op = Operation.objects.select_related("owner").filter(pk=op_id).first()
    given = item_owner(op).user if op is not None else None
    return services.reassign_operation(op_id, actor=actor, reason=reason, owner=owner, given=given)


def assign_enquiry(enquiry_id, *, actor, reason, owner):
    """Reassign an enquiry, the owner its queue's policy gave it said as the one it came from."""
    from intake import services
    from intake.models import Enquiry

    enquiry = Enquiry.objects.select_related("owner").filter(pk=enquiry_id).first()
    given = item_owner(enquiry).user if enquiry is not None else None
    return services.assign_enquiry(enquiry_id, actor=actor, reason=reason, owner=owner, given=given)
