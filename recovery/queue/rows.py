"""The page's rows: each row's object, owner, why they own it and next actions, fetched in
one query per kind of row and one for the owners (never one per row)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import Count, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.functional import cached_property

from intake.models import Enquiry
from intake.residentmodels import ResidentAnswer
from ledger.models import Attempt, Integration, Operation
from recovery import messages, ownership
from recovery.queue.sources import KIND_ANSWER, KIND_ENQUIRY, KIND_INTEGRATION, KIND_OPERATION

_SUBJECT_TYPES = {
    KIND_OPERATION: "ledger.operation",
    KIND_ENQUIRY: "intake.enquiry",
    KIND_INTEGRATION: "ledger.integration",
    KIND_ANSWER: "intake.residentanswer",
}


@dataclass
class Row:
    kind: str
    key: str
    queue: str
    since: datetime
    owner_id: int | None
    integration: str | None
    customer: bool
    due: datetime | None
    overdue: bool
    attempt: datetime | None = None
    obj: object = None
    owner: object = None
    owner_why: str = ""
    owner_label: str = ""  # the owner's name, or "admins" where no owner is set
    actions: list = field(default_factory=list)
    can_take: bool = False  # "Assign to me": this person may reassign it and is not its owner

    @cached_property
    def url(self) -> str:
        """The row's own page; its action links are this with ``?action=``. Reversed once per
        row, not once per link: a page has hundreds of action links."""
        if self.kind == KIND_OPERATION:
            return reverse("recovery:operation", args=[self.obj.pk])
        if self.kind == KIND_ENQUIRY:
            return reverse("recovery:enquiry", args=[self.obj.reference])
        if self.kind == KIND_ANSWER:
            return reverse("recovery:answer", args=[self.obj.pk])
        return reverse("recovery:backlog", args=[self.obj.name])


def last_attempt(outer: str, column: str):
    return Subquery(
        Attempt.objects.filter(**{outer: OuterRef("pk")})
        .order_by("-started_at", "-pk")
        .values(column)[:1]
    )


def with_last_attempt(qs, outer="operation"):
    return qs.annotate(
        last_attempt_at=last_attempt(outer, "started_at"),
        last_attempt_outcome=last_attempt(outer, "outcome"),
        last_attempt_kind=last_attempt(outer, "kind"),
        last_attempt_status=last_attempt(outer, "response_status"),
    )


def held_count():
    return Coalesce(
        Subquery(
            Operation.objects.filter(integration=OuterRef("pk"), held=True)
            .order_by()
            .values("integration")
            .annotate(n=Count("pk"))
            .values("n")[:1]
        ),
        Value(0),
    )


def attach(rows: list[Row], *, user=None):
    """Fetch the page's objects and owners: at most one query per kind, none per row."""
    keys = {
        kind: [r.key for r in rows if r.kind == kind]
        for kind in (KIND_OPERATION, KIND_ENQUIRY, KIND_INTEGRATION, KIND_ANSWER)
    }
    objects = {}
    if keys[KIND_OPERATION]:
        ops = with_last_attempt(
            Operation.objects.filter(pk__in=keys[KIND_OPERATION]).select_related(
                "enquiry", "integration"
            )
        )
        objects.update({(KIND_OPERATION, str(o.pk)): o for o in ops})
    if keys[KIND_ENQUIRY]:
        enquiries = with_last_attempt(
            Enquiry.objects.filter(reference__in=keys[KIND_ENQUIRY]), outer="operation__enquiry"
        )
        objects.update({(KIND_ENQUIRY, e.reference): e for e in enquiries})
    if keys[KIND_INTEGRATION]:
        integrations = Integration.objects.filter(name__in=keys[KIND_INTEGRATION]).annotate(
            held=held_count()
        )
        objects.update({(KIND_INTEGRATION, i.name): i for i in integrations})
    if keys[KIND_ANSWER]:
        waiting = ResidentAnswer.objects.filter(pk__in=keys[KIND_ANSWER]).select_related("enquiry")
        objects.update({(KIND_ANSWER, str(a.pk)): a for a in waiting})
    owner_ids = {r.owner_id for r in rows if r.owner_id}
    owners = get_user_model().objects.in_bulk(owner_ids) if owner_ids else {}
    given = ownership.latest_handovers(
        [
            (_SUBJECT_TYPES[kind], str(getattr(o, "pk", "")))
            for (kind, _), o in objects.items()
            if getattr(o, "owner_id", None)
        ]
    )
    for row in rows:
        row.obj = objects.get((row.kind, row.key))
        row.owner = owners.get(row.owner_id)
        if row.obj is not None and row.owner is not None:
            direct = getattr(row.obj, "owner_id", None) == row.owner_id
            handover = given.get((_SUBJECT_TYPES[row.kind], str(row.obj.pk)))
            row.owner_why = (
                "owns this integration"
                if row.kind == KIND_INTEGRATION and direct and handover is None
                else ownership.owner_why(direct, [handover] if handover else [], queue=row.queue)
            )
        elif row.obj is not None:
            # No owner given and none set for its queue: the admins (never "nobody").
            fallen = ownership.effective_owner(None, None, queue=row.queue)
            row.owner_why = fallen.why
        row.owner_label = row.owner.get_username() if row.owner else str(messages.OWNER_ADMINS)
        if user is not None and row.obj is not None:
            row.actions = row_actions(row, user)
            reassign = "reassign" if row.kind == KIND_OPERATION else "assign"
            # Not when it is mine already, directly or as its queue's owner.
            row.can_take = reassign in row.actions and row.owner_id != user.pk


def row_actions(row: Row, user) -> list[str]:
    """Next allowed actions, from state, policy and permissions (no queries once perms load)."""
    from recovery import permissions

    if row.kind == KIND_OPERATION:
        return permissions.operation_actions(row.obj, user)
    if row.kind == KIND_ENQUIRY:
        return permissions.enquiry_actions(row.obj, user)
    if row.kind == KIND_INTEGRATION:
        return permissions.integration_actions(row.obj, user)
    if row.kind == KIND_ANSWER and user.has_perm("intake.review_enquiry"):
        return ["attach", "set_aside"]
    return []
