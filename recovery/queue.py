"""The queue of work that needs a person, paged in the database with a constant query count.

Four sources become one list with one SQL UNION of identically shaped rows (kind, key, queue,
since, owner, integration, customer-affecting, response due, overdue): the union is ordered and
sliced in PostgreSQL, so a page costs the same whatever the queue's length. The rows of the page
are then fetched in one query per kind (never one per row).

Indexes: operations come through ledger's partial index ``operation_queue`` (state in
unknown/failed, integration, state_changed_at); enquiries through intake's partial index
``enquiry_queue`` (state, state_changed_at); integrations are a handful of rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import connection
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
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property

from intake.models import Enquiry, EnquiryState
from ledger.models import Attempt, Integration, Op, Operation
from ledger.policies import POLICIES
from recovery import ownership
from recovery.models import Queue, ResponsePolicy
from recovery.views.common import whole_number
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
    "q_attempt",
]
# Overdue first, then what the customer feels, then the oldest.
ORDERING = ["-q_overdue", "-q_customer", "q_since", "q_key"]
# The other orders a person may choose (?sort=): value -> (label, the union's ORDER BY).
# Within one group of the page's UNION each of these agrees with the group's own index order
# (due = since + one period), so a page still reads at most offset + size + 1 rows a group.
SORTS = {
    "": ("Most urgent", "q_overdue DESC, q_customer DESC, q_since ASC, q_key ASC"),
    "age": ("Oldest first", "q_since ASC, q_key ASC"),
    "due": ("Response due", "q_due ASC NULLS LAST, q_since ASC, q_key ASC"),
    "attempt": ("Last attempt", "q_attempt DESC NULLS LAST, q_since ASC, q_key ASC"),
}
# How "what failed the same way" is written in an address (?group=): the five parts of a group's
# key, joined by GROUP_SEP (none of them can hold it: names, codes and a number).
GROUP_SEP = "~"


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
        q_policy_owner=policy_owner,
        q_integration=Cast(integration_name, output_field=CharField()),
        q_customer=Value(customer, output_field=IntegerField())
        if isinstance(customer, int)
        else customer,
        q_due=due,
        q_overdue=Case(
            When(q_due__lt=now, then=Value(1)), default=Value(0), output_field=IntegerField()
        ),
        q_attempt=F("last_attempted_at")
        if kind == KIND_OPERATION
        else Value(None, output_field=DateTimeField()),
    )


@dataclass
class Filters:
    owner: str = ""  # a user id, "none" for unowned
    queue: str = ""  # a Queue key
    integration: str = ""  # an Integration name
    overdue: bool = False
    mine: bool = False
    user_id: int | None = None
    sort: str = ""  # a key of SORTS
    group: GroupKey | None = None  # one group of operations that failed the same way
    # A value in the address that names nothing: said on the page, never silently "all".
    not_understood: list[str] = field(default_factory=list)

    @classmethod
    def from_request(cls, request) -> Filters:
        get = request.GET
        queue = get.get("state", "")
        integration = get.get("integration", "")
        owner = get.get("owner", "")
        understood = {
            # name: (is the value one we know?, what is shown instead)
            "state": (queue in Queue.values, "all queues"),
            "integration": (integration in dict(Integration.NAMES), "every system"),
            # A user's id within PostgreSQL's bigint ("²" and 10**30 are not understood, not a 500).
            "owner": (owner == "none" or whole_number(owner, maximum=2**63 - 1), "anyone"),
            "overdue": (get.get("overdue") in ("1", "on"), "overdue or not"),
            "mine": (get.get("mine") in ("1", "on"), "everyone's"),
            "sort": (get.get("sort", "") in SORTS, "the most urgent first"),
            "group": (GroupKey.parse(get.get("group", "")) is not None, "every group"),
        }
        not_understood = [
            f"{name} “{get[name][:40]}” not understood; showing {instead}."
            for name, (known, instead) in understood.items()
            if get.get(name) and not known
        ]
        return cls(
            owner=owner if understood["owner"][0] else "",
            queue=queue if understood["state"][0] else "",
            integration=integration if understood["integration"][0] else "",
            overdue=understood["overdue"][0],
            mine=understood["mine"][0],
            user_id=request.user.pk,
            sort=get.get("sort", "") if understood["sort"][0] else "",
            group=GroupKey.parse(get.get("group", "")),
            not_understood=not_understood,
        )

    @property
    def active(self) -> bool:
        return bool(
            self.owner or self.queue or self.integration or self.overdue or self.mine or self.group
        )

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
        # Mine: what I own directly, and what is in a queue I own (an item escalated away from
        # me to the backup owner is still in my queue).
        selected = [
            qs.filter(Q(q_owner=filters.user_id) | Q(q_policy_owner=filters.user_id))
            for qs in selected
        ]
    if filters.owner == "none":
        selected = [qs.filter(q_owner__isnull=True) for qs in selected]
    elif filters.owner:
        selected = [qs.filter(q_owner=int(filters.owner)) for qs in selected]
    if filters.overdue:
        selected = [qs.filter(q_overdue=1) for qs in selected]
    if filters.group:
        g = filters.group
        selected = [
            qs.filter(
                q_kind=KIND_OPERATION,
                q_queue=g.state,
                q_integration=g.integration,
                attention=g.attention,
                last_error_class=g.error_class,
                last_error_status=g.status,
            )
            for qs in selected
            if qs.model is Operation and (not filters.queue or filters.queue == g.state)
        ]
        if not selected:
            return [ops.none().values(*COLUMNS)]
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
    attempt: datetime | None = None
    obj: object = None
    owner: object = None
    owner_why: str = ""
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
        return reverse("recovery:backlog", args=[self.obj.name])


@dataclass
class Page:
    rows: list[Row]
    number: int
    count: int  # exact up to COUNT_CAP; with ``more``, at least this many wait
    size: int = PAGE_SIZE
    more: bool = False
    further: bool = False  # a row exists after this page

    @property
    def pages(self) -> int | None:
        return None if self.more else max(1, -(-self.count // self.size))

    @property
    def count_label(self) -> str:
        return f"{self.count:,}+" if self.more else f"{self.count:,}"

    @property
    def has_next(self) -> bool:
        return self.further

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


# The page counts exactly up to here, then says "10,000+": counting every row costs a read of
# every row, and no one pages through ten thousand items (they filter).
COUNT_CAP = 10_000
# Which customer-affecting flags each integration's actions carry (ledger.policies is the
# registry of actions): one flag means the integration's rows are one group, both mean two.
CUSTOMER_FLAGS: dict[str | None, set[bool]] = {}
for _action, _policy in POLICIES.items():
    CUSTOMER_FLAGS.setdefault(_policy.integration, set()).add(_action in CUSTOMER_AFFECTING_ACTIONS)
# A group's own order: its index's, oldest first (the queue's order within one policy).
BY_AGE_SQL = "q_since, q_key"
# The queue's order, as SQL (ORDERING's).
ORDERING_SQL = SORTS[""][1]
# A group's own order under each sort: its index's, agreeing with SORTS within the group.
GROUP_ORDER_SQL = {
    "": BY_AGE_SQL,
    "age": BY_AGE_SQL,
    "due": BY_AGE_SQL,
    "attempt": "last_attempted_at DESC NULLS LAST, " + BY_AGE_SQL,
}


@dataclass(frozen=True)
class GroupKey:
    """Operations that failed the same way: one system, one state, one reason a person must
    look, one error class and HTTP status (as Sentry groups events by cause)."""

    integration: str | None
    state: str
    attention: str
    error_class: str
    status: int | None

    @classmethod
    def parse(cls, value: str) -> GroupKey | None:
        parts = value.split(GROUP_SEP)
        if len(parts) != 5:
            return None
        integration, state, attention, error_class, status = parts
        if integration and integration not in dict(Integration.NAMES):
            return None
        if state not in (Op.UNKNOWN, Op.FAILED) or not re.fullmatch(r"[a-z_]{0,40}", attention):
            return None
        if not re.fullmatch(r"[a-z_]{0,32}", error_class) or not re.fullmatch(
            r"[0-9]{0,3}", status
        ):
            return None
        return cls(
            integration or None, state, attention, error_class, int(status) if status else None
        )

    def __str__(self) -> str:
        parts = (self.integration or "", self.state, self.attention, self.error_class)
        return GROUP_SEP.join([*parts, "" if self.status is None else str(self.status)])


@dataclass
class Group:
    """One branch of the page's UNION, written out: ``columns`` are the union's (in COLUMNS'
    order), read ``FROM`` one table ``WHERE`` the group's rows are. ``order``: the group's own
    order, read from its index oldest first with a LIMIT (None: a few rows, read whole).
    ``late``: read in the second pass, only as far back as ``since_before`` (see page())."""

    columns: str
    column_params: list
    table: str
    where: str
    where_params: list
    order: str | None = BY_AGE_SQL
    late: bool = False
    since: str = "state_changed_at"
    period: object = None  # the group's response period (None: no policy)

    def sql(self, *, limit=None, since_before=None) -> tuple[str, list]:
        where, params = self.where, [*self.column_params, *self.where_params]
        if since_before is not None:
            where += f" AND {self.since} <= %s"
            params.append(since_before)
        sql = f"SELECT {self.columns} FROM {self.table} WHERE {where}"
        if limit is not None and self.order:
            sql += f" ORDER BY {self.order} LIMIT %s"
            params.append(limit)
        return sql, params

    def count_sql(self) -> tuple[str, list]:
        return f"SELECT 1 FROM {self.table} WHERE {self.where}", list(self.where_params)


def _group(
    *,
    kind,
    key,
    queue,
    table,
    where,
    params,
    integration_id,
    integration_name,
    customer,
    filters,
    now,
    policies,
    since="state_changed_at",
    order=BY_AGE_SQL,
    late=False,
):
    """One group of rows under one policy, written as SQL, or None (filtered out).

    Within a group the response period is one constant, so due = since + period and the
    overdue rows are exactly the oldest: the group's own order (oldest first) agrees with the
    queue's order, and its first N rows are all the queue's first N can need from it.

    ``customer`` is 0, 1, or a SQL expression over the row (with ``params`` of its own).
    """
    if filters.queue and filters.queue != queue:
        return None
    if filters.integration and filters.integration != integration_name:
        return None
    where, params = [where], list(params)
    period = policies.value(queue, integration_id, "response_period")
    if filters.overdue:
        if period is None:
            return None
        where.append(f"{since} < %s")
        params.append(now - period)
    if filters.group:
        g = filters.group
        if kind != KIND_OPERATION or queue != g.state or integration_name != g.integration:
            return None
        where.append("attention = %s AND last_error_class = %s")
        params += [g.attention, g.error_class]
        if g.status is None:
            where.append("last_error_status IS NULL")
        else:
            where.append("last_error_status = %s")
            params.append(g.status)
    policy_owner = policies.value(queue, integration_id, "owner_id")
    owner = f"COALESCE(owner_id, {_int(policy_owner)})"
    if filters.mine and policy_owner != filters.user_id:
        # Mine (as in sources()): owned directly, or the whole group when I own its queue.
        where.append(f"{owner} = {_int(filters.user_id)}")
    if filters.owner == "none":
        where.append(f"{owner} IS NULL")
    elif filters.owner:
        where.append(f"{owner} = {_int(int(filters.owner))}")
    column_params = [kind, queue, integration_name]
    if isinstance(customer, int):
        customer_sql = str(customer)
    else:
        customer_sql, customer_params = customer
        column_params += customer_params
    if period is None:
        due, overdue = "NULL::timestamptz", "0"
    else:
        due, overdue = f"{since} + %s", f"CASE WHEN {since} < %s THEN 1 ELSE 0 END"
        column_params += [period, now - period]
    attempt = "last_attempted_at" if kind == KIND_OPERATION else "NULL::timestamptz"
    columns = (
        f"%s::varchar AS q_kind, ({key})::varchar AS q_key, %s::varchar AS q_queue, "
        f"{since} AS q_since, {owner} AS q_owner, %s::varchar AS q_integration, "
        f"{customer_sql} AS q_customer, {due} AS q_due, {overdue} AS q_overdue, "
        f"{attempt} AS q_attempt"
    )
    if order is not None and kind == KIND_OPERATION:
        order = order.replace(BY_AGE_SQL, GROUP_ORDER_SQL[filters.sort])
    return Group(
        columns=columns,
        column_params=column_params,
        table=table,
        where=" AND ".join(where),
        where_params=params,
        order=order,
        late=late,
        since=since,
        period=period,
    )


def _timestamp(value: datetime) -> str:
    """A datetime of ours written into the SQL (the page's ``now``)."""
    return f"'{value.isoformat()}'::timestamptz"


def _int(value) -> str:
    """An integer (or NULL) written into the SQL: IDs only, never text from a request."""
    return "NULL::integer" if value is None else str(int(value))


def groups(filters: Filters, now: datetime, policies: Policies, integrations) -> list[Group]:
    """The page's branches: one Group per group of the queue that the filters leave.

    Operations: one group per state and integration (``integrations``: (pk, name) of every
    row, plus None), read through the partial index ``operation_queue`` (state, integration,
    state_changed_at) oldest first; split in two by ``action`` where the integration carries
    both customer-affecting and internal actions. Enquiries: one group per queue, read through
    ``enquiry_queue``. Paused integrations: one group per integration (a primary-key read).

    Written as SQL rather than built with the ORM: the page has a dozen or more of these, and
    building and compiling them as querysets three times a page (count, first and second pass)
    cost more than all of its queries (docs/benchmarks.md). ``sources()`` is the same queue as
    querysets, and the tests hold the two to the same rows in the same order.
    """
    found = []
    actions = tuple(sorted(CUSTOMER_AFFECTING_ACTIONS))
    in_actions = "action IN (" + ", ".join(["%s"] * len(actions)) + ")"
    customer_op = (f"CASE WHEN {in_actions} THEN 1 ELSE 0 END", list(actions))
    for state in (Op.UNKNOWN, Op.FAILED):
        for integration_id, name in [*integrations, (None, None)]:
            if integration_id is None:
                # IS NULL is no equality to PostgreSQL: ordered by the index's own columns,
                # the integration-less group is still read from operation_queue, oldest first.
                where, params, order = (
                    "state = %s AND integration_id IS NULL",
                    [state],
                    ("integration_id, " + BY_AGE_SQL),
                )
            else:
                where, params, order = (
                    "state = %s AND integration_id = %s",
                    [state, integration_id],
                    BY_AGE_SQL,
                )
            flags = CUSTOMER_FLAGS.get(name, set())
            if len(flags) == 1:
                split = [(where, params, customer_op)]
            else:
                split = [
                    (f"{where} AND {in_actions}", params + list(actions), 1),
                    (f"{where} AND NOT {in_actions}", params + list(actions), 0),
                ]
            for part_where, part_params, customer in split:
                found.append(
                    _group(
                        kind=KIND_OPERATION,
                        key="id",
                        queue=state,
                        table="ledger_operation",
                        where=part_where,
                        params=part_params,
                        integration_id=integration_id,
                        integration_name=name,
                        customer=customer,
                        filters=filters,
                        now=now,
                        policies=policies,
                        order=order,
                    )
                )
    enquiry = {
        "kind": KIND_ENQUIRY,
        "key": "reference",
        "table": "intake_enquiry",
        "integration_id": None,
        "integration_name": None,
        "filters": filters,
        "now": now,
        "policies": policies,
    }
    enquiry_groups = [
        # (queue, conditions, their parameters, customer-affecting, read in the second pass)
        (Queue.NEEDS_INFORMATION, "state = %s", [EnquiryState.NEEDS_INFORMATION], 0, False),
        # An enquiry whose delivery operation is itself in the queue is that row, not a second
        # one. Most of these enquiries are excluded (their operation is the row), and finding
        # the few left means joining every one to the open operations: read late, in a second
        # pass, only as far back as the rest of the page leaves room (page()).
        (
            Queue.SUBMISSION_UNKNOWN,
            "state = %s AND NOT EXISTS (SELECT 1 FROM ledger_operation o WHERE "
            "o.enquiry_id = intake_enquiry.id AND o.state IN (%s, %s))",
            [EnquiryState.SUBMISSION_UNKNOWN, Op.UNKNOWN, Op.FAILED],
            1,
            True,
        ),
        # Waiting for review with no category a person could accept: the suggester was unsure.
        (
            Queue.UNRESOLVED,
            "state = %s AND category_id IS NULL",
            [EnquiryState.READY_FOR_REVIEW],
            1,
            False,
        ),
    ]
    for queue, where, params, customer, late in enquiry_groups:
        found.append(
            _group(queue=queue, where=where, params=params, customer=customer, late=late, **enquiry)
        )
    for integration_id, name in integrations:
        # A handful of rows, each under its own policy: one primary-key read each.
        found.append(
            _group(
                kind=KIND_INTEGRATION,
                key="name",
                queue=Queue.PAUSED,
                table="ledger_integration",
                where="id = %s AND (paused OR awaiting_backlog_review)",
                params=[integration_id],
                integration_id=integration_id,
                integration_name=name,
                customer=1,
                filters=filters,
                now=now,
                policies=policies,
                since=f"COALESCE(paused_at, {_timestamp(now)})",
                order=None,
            )
        )
    return [g for g in found if g is not None]


def _late_bound_sorted(rows: list[dict], wanted: int, sort: str, period):
    """As ``_late_bound`` under a chosen sort. The late rows are enquiries: no attempt of their
    own (they sort after every operation that has one), due at since + ``period``."""
    if len(rows) < wanted:
        return None
    last = rows[wanted - 1]
    if sort == "age":
        return last["q_since"]
    if sort == "due":
        if period is None:  # their due is NULL: after every row that has one
            return False if last["q_due"] is not None else last["q_since"]
        return None if last["q_due"] is None else last["q_due"] - period
    # "attempt"
    return False if last["q_attempt"] is not None else last["q_since"]


def _late_bound(rows: list[dict], wanted: int, now: datetime, period):
    """The newest ``q_since`` a customer-affecting row under ``period`` can have and still come
    before the last of ``rows`` (the first pass, in the queue's order): None for no bound,
    False when none can. A bound may let in a row too many, never leave one out."""
    if len(rows) < wanted:
        return None  # the first pass did not fill the page: every one may be on it
    last = rows[wanted - 1]
    overdue_before = now - period if period is not None else None
    if last["q_overdue"]:
        # Only an overdue row comes before an overdue one; before an overdue customer-affecting
        # row, only an older one.
        if overdue_before is None:
            return False
        return min(last["q_since"], overdue_before) if last["q_customer"] else overdue_before
    if last["q_customer"]:
        # Overdue, or older than a customer-affecting row that is not overdue.
        return max(last["q_since"], overdue_before) if overdue_before else last["q_since"]
    return None  # any customer-affecting row comes before an internal one that is not overdue


def _union(parts: list[tuple[str, list]]) -> tuple[str, list]:
    sql = " UNION ALL ".join(f"({part})" for part, _params in parts)
    return sql, [p for _part, params in parts for p in params]


def _count(parts: list[Group]) -> int:
    """The queue's length under the filters, counted up to COUNT_CAP + 1."""
    sql, params = _union([g.count_sql() for g in parts])
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM ({sql} LIMIT %s) AS counted", [*params, COUNT_CAP + 1]
        )
        return cursor.fetchone()[0]


def _fetch(parts: list[tuple[str, list]], start: int, end: int, sort: str = "") -> list[dict]:
    """Rows start..end of the union of ``parts`` in the queue's order (or the chosen ``sort``),
    as dicts of COLUMNS."""
    sql, params = _union(parts)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT * FROM ({sql}) AS queue ORDER BY {SORTS[sort][1]} LIMIT %s OFFSET %s",
            [*params, end - start, start],
        )
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def page(filters: Filters, number: int = 1, *, user=None, now=None, size=PAGE_SIZE) -> Page:
    """One page of the queue in a constant number of queries, whatever the queue's length.

    Policies and integrations (2 queries), a count up to COUNT_CAP (1), the page's rows (2:
    without, then with the stuck enquiries, see ``groups``), then one query per kind of row
    shown and one for the owners (``attach``). No query reads every waiting operation: each
    group gives at most offset + size + 1 rows, oldest first, and the outer query puts them in
    the queue's order and takes the page.
    """
    now = now or timezone.now()
    policies = Policies.load()
    integrations = list(Integration.objects.order_by("pk").values_list("pk", "name"))
    parts = groups(filters, now, policies, integrations)
    if not parts:
        return Page(rows=[], number=1, count=0, size=size)
    count = _count(parts)
    more = count > COUNT_CAP
    count = min(count, COUNT_CAP)
    if not more:  # past the end: the last page (the view says so)
        number = min(number, max(1, -(-count // size)))
    number = max(1, number)
    start = (number - 1) * size
    end = start + size + 1  # one more than the page: is there a next page?

    ordered = [g.sql(limit=end) for g in parts if not g.late]
    late = [g for g in parts if g.late]
    raw = _fetch(ordered, start, end, filters.sort) if ordered else []
    if late:
        # First pass without the stuck enquiries; the row that closes it bounds how old one of
        # them must be to get onto the page, so the join reads only those.
        period = policies.value(Queue.SUBMISSION_UNKNOWN, None, "response_period")
        if not ordered:
            bound = None
        elif filters.sort:
            bound = _late_bound_sorted(raw, end - start, filters.sort, period)
        else:
            bound = _late_bound(raw, end - start, now, period)
        # Run even when none can reach the page (bound False): the page's query count stays
        # the same whatever the queue holds.
        chosen = ordered if bound is False else ordered + [g.sql(since_before=bound) for g in late]
        raw = _fetch(chosen, start, end, filters.sort)
    further = len(raw) > size
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
            attempt=r["q_attempt"],
        )
        for r in raw[:size]
    ]
    attach(rows, user=user)
    return Page(rows=rows, number=number, count=count, size=size, more=more, further=further)


_SUBJECT_TYPES = {
    KIND_OPERATION: "ledger.operation",
    KIND_ENQUIRY: "intake.enquiry",
    KIND_INTEGRATION: "ledger.integration",
}


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
                else ownership.owner_why(direct, [handover] if handover else [])
            )
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
    return []


def oldest_since(now=None):
    """When the oldest item in the whole queue entered its state (None: the queue is empty)."""
    now = now or timezone.now()
    qs = union(Filters(), now).order_by("q_since")
    first = qs.first()
    return first["q_since"] if first else None


# SORTS as the ORM writes them (all_rows, and the tests that hold page() to it).
ORM_SORTS = {
    "": ORDERING,
    "age": ["q_since", "q_key"],
    "due": [F("q_due").asc(nulls_last=True), "q_since", "q_key"],
    "attempt": [F("q_attempt").desc(nulls_last=True), "q_since", "q_key"],
}


def all_rows(now=None, filters: Filters | None = None) -> list[dict]:
    """Every queue row's columns (for the escalation task and the dashboard's chart)."""
    now = now or timezone.now()
    filters = filters or Filters()
    return list(union(filters, now).order_by(*ORM_SORTS[filters.sort]))


@dataclass
class FailureGroup:
    """One line of "what failed the same way": its key, how many, since when."""

    key: GroupKey
    count: int
    oldest: datetime

    @property
    def label(self) -> str:
        from recovery.words import group_label

        return group_label(self.key)

    @property
    def param(self) -> str:
        return str(self.key)


GROUPS_SHOWN = 8


def failure_groups(filters: Filters, *, least: int = 2) -> list[FailureGroup]:
    """Operations in the queue grouped by how they failed (GroupKey), the largest first: one
    query, counted from the index ``operation_groups`` alone. Only groups of ``least`` or more
    are worth a line; a filter on a queue of enquiries or a paused system leaves none."""
    if filters.queue and filters.queue not in (Op.UNKNOWN, Op.FAILED):
        return []
    if filters.group:
        return []
    where, params = ["o.state IN (%s, %s)"], [Op.UNKNOWN, Op.FAILED]
    if filters.queue:
        where.append("o.state = %s")
        params.append(filters.queue)
    if filters.integration:
        where.append("o.integration_id = (SELECT id FROM ledger_integration WHERE name = %s)")
        params.append(filters.integration)
    # Grouped in the index's own column order (operation_groups): PostgreSQL aggregates its
    # entries as it reads them, without a hash table or a join per row; the few groups left
    # are joined to their integration's name after.
    sql = (
        "SELECT i.name, g.state, g.attention, g.last_error_class, g.last_error_status, g.n, "
        "g.oldest FROM (SELECT o.state, o.integration_id, o.attention, o.last_error_class, "
        "o.last_error_status, COUNT(*) AS n, MIN(o.state_changed_at) AS oldest "
        f"FROM ledger_operation o WHERE {' AND '.join(where)} "
        "GROUP BY o.state, o.integration_id, o.attention, o.last_error_class, "
        "o.last_error_status HAVING COUNT(*) >= %s) g "
        "LEFT JOIN ledger_integration i ON i.id = g.integration_id "
        "ORDER BY g.n DESC, g.oldest LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, least, GROUPS_SHOWN])
        rows = cursor.fetchall()
    return [
        FailureGroup(GroupKey(name, state, attention, error_class, status), n, oldest)
        for name, state, attention, error_class, status, n, oldest in rows
    ]
