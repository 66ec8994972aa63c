"""The queue of work that needs a person, paged in the database with a constant query count.

Four sources become one list with one SQL UNION of identically shaped rows (kind, key, queue,
since, owner, integration, customer-affecting, response due, overdue): the union is ordered and
sliced in PostgreSQL, so a page costs the same whatever the queue's length. The rows of the page
are then fetched in one query per kind (never one per row).

Indexes: operations come through ledger's partial index ``operation_open`` (state in
approved/submitted/failed/unknown, with state_changed_at); enquiries through the index on
``intake_enquiry.state``; integrations are a handful of rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import (
    Case,
    CharField,
    Count,
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce
from django.utils import timezone

from intake.models import Enquiry, EnquiryState
from ledger.models import Attempt, Integration, Op, Operation
from recovery.models import Queue, ResponsePolicy
from recovery.words import CUSTOMER_AFFECTING_ACTIONS

PAGE_SIZE = 50
KIND_OPERATION, KIND_ENQUIRY, KIND_INTEGRATION = "operation", "enquiry", "integration"
COLUMNS = [
    "q_kind",
    "q_key",
    "q_queue",
    "q_since",
    "q_owner",
    "q_integration",
    "q_customer",
    "q_due",
    "q_overdue",
]
# Overdue first, then what the customer feels, then the oldest.
ORDERING = ["-q_overdue", "-q_customer", "q_since", "q_key"]


class Policies:
    """Every ResponsePolicy row, loaded once per page (one query; there are a handful).

    The most specific row wins: queue + integration, then queue alone, then integration alone,
    then the default row (both blank). ``value()`` resolves one (queue, integration) in Python;
    ``expression()`` gives the same choice as a SQL ``CASE`` over the row's own columns, so no
    query reads ``recovery_responsepolicy`` once per queue row.
    """

    COLUMNS = ("queue", "integration_id", "response_period", "owner_id", "backup_owner_id")

    def __init__(self, rows: list[dict]):
        self.rows = sorted(rows, key=lambda p: (not p["queue"], p["integration_id"] is None))

    @classmethod
    def load(cls) -> Policies:
        return cls(list(ResponsePolicy.objects.order_by().values(*cls.COLUMNS)))

    def value(self, queue: str, integration_id: int | None, column: str):
        for p in self.rows:
            if p["queue"] in ("", queue) and p["integration_id"] in (None, integration_id):
                return p[column]
        return None

    def expression(self, queue, integration_id, column: str, output_field):
        """``column`` of the policy for each row: ``queue``/``integration_id`` are F() (the
        row's own column) or plain values (decided here, in Python)."""
        whens = []
        for p in self.rows:
            conditions, applies = [], True
            for wanted, given in ((p["queue"], queue), (p["integration_id"], integration_id)):
                given = given.value if isinstance(given, Value) else given
                if wanted in ("", None):
                    continue
                if isinstance(given, F):
                    conditions.append(Q(**{given.name: wanted}))
                elif given != wanted:
                    applies = False
            if not applies:
                continue
            then = Value(p[column], output_field=output_field)
            if not conditions:  # applies to every remaining row: the fallback
                return self._typed(whens, then, output_field)
            whens.append(When(Q(*conditions), then=then))
        return self._typed(whens, Value(None, output_field=output_field), output_field)

    @staticmethod
    def _typed(whens, default, output_field):
        # Typed, so that a CASE of NULLs (a policy without an owner) is not taken for text.
        expression = Case(*whens, default=default, output_field=output_field) if whens else default
        return Cast(expression, output_field=output_field)


def _shape(
    qs, *, kind, key, queue, since, owner, integration_id, integration_name, customer, now, policies
):
    """Annotate one source with the union's columns, in the union's order."""
    period = policies.expression(queue, integration_id, "response_period", DurationField())
    due = ExpressionWrapper(since + period, output_field=DateTimeField())
    policy_owner = policies.expression(queue, integration_id, "owner_id", IntegerField())
    return qs.annotate(
        q_kind=Value(kind, output_field=CharField()),
        q_key=Cast(key, output_field=CharField()),
        q_queue=Cast(queue, output_field=CharField()),
        q_since=since,
        q_owner=Coalesce(owner, policy_owner, output_field=IntegerField()),
        q_integration=Cast(integration_name, output_field=CharField()),
        q_customer=Value(customer, output_field=IntegerField())
        if isinstance(customer, int)
        else customer,
        q_due=due,
        q_overdue=Case(
            When(q_due__lt=now, then=Value(1)), default=Value(0), output_field=IntegerField()
        ),
    )


@dataclass
class Filters:
    owner: str = ""  # a user id, "none" for unowned
    queue: str = ""  # a Queue key
    integration: str = ""  # an Integration name
    overdue: bool = False
    mine: bool = False
    user_id: int | None = None

    @classmethod
    def from_request(cls, request) -> Filters:
        get = request.GET
        queue = get.get("state", "")
        integration = get.get("integration", "")
        owner = get.get("owner", "")
        return cls(
            owner=owner if owner == "none" or owner.isdigit() else "",
            queue=queue if queue in Queue.values else "",
            integration=integration if integration in dict(Integration.NAMES) else "",
            overdue=get.get("overdue") == "1",
            mine=get.get("mine") == "1",
            user_id=request.user.pk,
        )

    @property
    def active(self) -> bool:
        return bool(self.owner or self.queue or self.integration or self.overdue or self.mine)

    def queues(self) -> list[str]:
        """The queue keys this filter shows (for QueueVisit)."""
        shown = [q for q in Queue.values if q != Queue.REVIEW]
        return [self.queue] if self.queue else shown


def sources(filters: Filters, now: datetime, policies: Policies | None = None) -> list[QuerySet]:
    """One shaped queryset per kind of work, each already filtered (every row: see page())."""
    policies = policies or Policies.load()
    customer_op = Case(
        When(action__in=CUSTOMER_AFFECTING_ACTIONS, then=Value(1)),
        default=Value(0),
        output_field=IntegerField(),
    )
    ops = _shape(
        Operation.objects.filter(state__in=[Op.UNKNOWN, Op.FAILED]),
        kind=KIND_OPERATION,
        key=F("id"),
        queue=F("state"),
        since=F("state_changed_at"),
        owner=F("owner_id"),
        integration_id=F("integration_id"),
        integration_name=F("integration__name"),
        customer=customer_op,
        now=now,
        policies=policies,
    )
    # An enquiry whose delivery operation is itself in the queue is that row, not a second one.
    open_op = Exists(
        Operation.objects.filter(enquiry=OuterRef("pk"), state__in=[Op.UNKNOWN, Op.FAILED])
    )
    stuck = _shape(
        Enquiry.objects.filter(
            state__in=[EnquiryState.NEEDS_INFORMATION, EnquiryState.SUBMISSION_UNKNOWN]
        )
        .annotate(has_open_op=open_op)
        .exclude(state=EnquiryState.SUBMISSION_UNKNOWN, has_open_op=True),
        kind=KIND_ENQUIRY,
        key=F("reference"),
        queue=F("state"),
        since=F("state_changed_at"),
        owner=F("owner_id"),
        integration_id=Value(None, output_field=IntegerField()),
        integration_name=Value(None, output_field=CharField()),
        customer=Case(
            When(state=EnquiryState.SUBMISSION_UNKNOWN, then=Value(1)),
            default=Value(0),
            output_field=IntegerField(),
        ),
        now=now,
        policies=policies,
    )
    # Waiting for review with no category a person could accept: the suggester was unsure.
    unresolved = _shape(
        Enquiry.objects.filter(state=EnquiryState.READY_FOR_REVIEW, category__isnull=True),
        kind=KIND_ENQUIRY,
        key=F("reference"),
        queue=Value(Queue.UNRESOLVED, output_field=CharField()),
        since=F("state_changed_at"),
        owner=F("owner_id"),
        integration_id=Value(None, output_field=IntegerField()),
        integration_name=Value(None, output_field=CharField()),
        customer=1,
        now=now,
        policies=policies,
    )
    paused = _shape(
        Integration.objects.filter(Q(paused=True) | Q(awaiting_backlog_review=True)),
        kind=KIND_INTEGRATION,
        key=F("name"),
        queue=Value(Queue.PAUSED, output_field=CharField()),
        since=Coalesce(F("paused_at"), Value(now), output_field=DateTimeField()),
        owner=F("owner_id"),
        integration_id=F("pk"),
        integration_name=F("name"),
        customer=1,
        now=now,
        policies=policies,
    )
    chosen = {
        Queue.UNKNOWN: ops,
        Queue.FAILED: ops,
        Queue.NEEDS_INFORMATION: stuck,
        Queue.SUBMISSION_UNKNOWN: stuck,
        Queue.UNRESOLVED: unresolved,
        Queue.PAUSED: paused,
    }
    if filters.queue:
        qs = chosen[filters.queue]
        if qs is ops or qs is stuck:
            qs = qs.filter(q_queue=filters.queue)
        selected = [qs]
    else:
        selected = [ops, stuck, unresolved, paused]
    if filters.integration:
        selected = [qs.filter(q_integration=filters.integration) for qs in selected]
    if filters.mine:
        selected = [qs.filter(q_owner=filters.user_id) for qs in selected]
    if filters.owner == "none":
        selected = [qs.filter(q_owner__isnull=True) for qs in selected]
    elif filters.owner:
        selected = [qs.filter(q_owner=int(filters.owner)) for qs in selected]
    if filters.overdue:
        selected = [qs.filter(q_overdue=1) for qs in selected]
    return [qs.order_by().values(*COLUMNS) for qs in selected]


def union(filters: Filters, now: datetime, policies: Policies | None = None):
    """Every row of the queue, unordered (the escalation task, the dashboard's totals)."""
    parts = sources(filters, now, policies)
    first, rest = parts[0], parts[1:]
    return first.union(*rest, all=True) if rest else first


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
    obj: object = None
    owner: object = None
    actions: list = field(default_factory=list)

    @property
    def queue_label(self) -> str:
        return Queue(self.queue).label


@dataclass
class Page:
    rows: list[Row]
    number: int
    count: int
    size: int = PAGE_SIZE

    @property
    def pages(self) -> int:
        return max(1, -(-self.count // self.size))

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def has_previous(self) -> bool:
        return self.number > 1


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


def page(filters: Filters, number: int = 1, *, user=None, now=None, size=PAGE_SIZE) -> Page:
    """One page of the queue: 2 queries for the union (count, rows) + one per kind shown."""
    now = now or timezone.now()
    qs = union(filters, now)
    count = qs.count()
    number = max(1, min(number, max(1, -(-count // size))))
    start = (number - 1) * size
    raw = list(qs.order_by(*ORDERING)[start : start + size])
    rows = [
        Row(
            kind=r["q_kind"],
            key=r["q_key"],
            queue=r["q_queue"],
            since=r["q_since"],
            owner_id=r["q_owner"],
            integration=r["q_integration"],
            customer=bool(r["q_customer"]),
            due=r["q_due"],
            overdue=bool(r["q_overdue"]),
        )
        for r in raw
    ]
    attach(rows, user=user)
    return Page(rows=rows, number=number, count=count, size=size)


def attach(rows: list[Row], *, user=None):
    """Fetch the page's objects and owners: at most one query per kind, none per row."""
    keys = {
        kind: [r.key for r in rows if r.kind == kind]
        for kind in (KIND_OPERATION, KIND_ENQUIRY, KIND_INTEGRATION)
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
    owner_ids = {r.owner_id for r in rows if r.owner_id}
    owners = get_user_model().objects.in_bulk(owner_ids) if owner_ids else {}
    for row in rows:
        row.obj = objects.get((row.kind, row.key))
        row.owner = owners.get(row.owner_id)
        if user is not None and row.obj is not None:
            row.actions = row_actions(row, user)


def row_actions(row: Row, user) -> list[str]:
    """Next allowed actions, from state, policy and permissions (no queries once perms load)."""
    from recovery import permissions

    if row.kind == KIND_OPERATION:
        return permissions.operation_actions(row.obj, user)
    if row.kind == KIND_ENQUIRY:
        return permissions.enquiry_actions(row.obj, user)
    if row.kind == KIND_INTEGRATION:
        return permissions.integration_actions(row.obj, user)
    return []


def oldest_since(now=None):
    """When the oldest item in the whole queue entered its state (None: the queue is empty)."""
    now = now or timezone.now()
    qs = union(Filters(), now).order_by("q_since")
    first = qs.first()
    return first["q_since"] if first else None


def all_rows(now=None, filters: Filters | None = None) -> list[dict]:
    """Every queue row's columns (for the escalation task and the dashboard's chart)."""
    now = now or timezone.now()
    return list(union(filters or Filters(), now).order_by(*ORDERING))
