"""What is in the queue, with which columns, state and due time: the one description of it.

Five sources of work: operations unknown or failed; enquiries that need information, or whose
submission is unknown with no open operation of their own, or whose receipt work keeps
failing; enquiries waiting for review with no category (the suggester was unsure); residents'
replies nobody could attach (intake.answers); paused integrations. Each is read in branches that
share one response policy (operations per state and integration, enquiries per queue, each
paused integration alone), and every branch is one short SELECT of identically shaped rows
(kind, key, queue, since, owner, integration, customer-affecting, due, overdue, last attempt).

Every reader takes the same branches: the page (``paging.page``) reads each oldest first with
a LIMIT and orders their UNION in PostgreSQL; the escalation task, the dashboard's totals,
bulk actions on a group and the drill read them whole (``all_rows``, ``whole``). The page and
the rest cannot disagree about what is in the queue: there is nothing else to disagree with.

Written as SQL rather than built with the ORM: the page has a dozen or more branches, and
building and compiling them as querysets three times a page (count, first and second pass)
cost more than all of its queries (docs/benchmarks.md).

Indexes: operations come through ledger's partial index ``operation_queue`` (state in
unknown/failed, integration, state_changed_at); enquiries through intake's partial index
``enquiry_queue`` (state, state_changed_at); integrations are a handful of rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils import timezone

from intake.models import EnquiryState
from intake.residentmodels import AnswerState
from ledger.models import Integration, OperationState
from ledger.policies import POLICIES
from ledger.receipt import FAILURES_FOR_A_PERSON
from recovery.models import Queue
from recovery.queue.filters import SORTS, Filters
from recovery.queue.policies import Policies
from recovery.words import CUSTOMER_AFFECTING_ACTIONS

KIND_OPERATION, KIND_ENQUIRY, KIND_INTEGRATION = "operation", "enquiry", "integration"
KIND_ANSWER = "answer"
# Which customer-affecting flags each integration's actions carry (ledger.policies is the
# registry of actions): one flag means the integration's rows are one branch, both mean two.
CUSTOMER_FLAGS: dict[str | None, set[bool]] = {}
for _action, _policy in POLICIES.items():
    CUSTOMER_FLAGS.setdefault(_policy.integration, set()).add(_action in CUSTOMER_AFFECTING_ACTIONS)
# A branch's own order: its index's, oldest first (the queue's order within one policy).
BY_AGE_SQL = "q_since, q_key"
# A branch's own order under each sort: its index's, agreeing with SORTS within the branch.
BRANCH_ORDER_SQL = {
    "": BY_AGE_SQL,
    "age": BY_AGE_SQL,
    "due": BY_AGE_SQL,
    "attempt": "last_attempted_at DESC NULLS LAST, " + BY_AGE_SQL,
}
# The enquiry queues: (queue, conditions, their parameters, customer-affecting, read late).
ENQUIRY_QUEUES = [
    (Queue.NEEDS_INFORMATION, "state = %s", [EnquiryState.NEEDS_INFORMATION], 0, False),
    # An enquiry whose delivery operation is itself in the queue is that row, not a second
    # one. Most of these enquiries are excluded (their operation is the row), and finding the
    # few left means joining every one to the open operations: the page reads them late, in a
    # second pass, only as far back as the rest of the page leaves room (paging.page).
    (
        Queue.SUBMISSION_UNKNOWN,
        "state = %s AND NOT EXISTS (SELECT 1 FROM ledger_operation o WHERE "
        "o.enquiry_id = intake_enquiry.id AND o.state IN (%s, %s))",
        [EnquiryState.SUBMISSION_UNKNOWN, OperationState.UNKNOWN, OperationState.FAILED],
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
    # Received, answered 202, and its receipt work keeps failing (ledger.receipt): no
    # acknowledgement, no suggestion. Read through intake's partial index
    # enquiry_receipt_pending (a handful of rows at any time).
    (
        Queue.RECEIPT_FAILING,
        "receipt_pending AND receipt_failures >= %s",
        [FAILURES_FOR_A_PERSON],
        1,
        False,
    ),
]


@dataclass
class Branch:
    """One branch of the queue's UNION, written out: ``columns`` are the union's, read
    ``FROM`` one table ``WHERE`` the branch's rows are. ``order``: the branch's own order, read
    from its index oldest first with a LIMIT (None: a few rows, read whole). ``late``: read by
    the page in a second pass, only as far back as ``since_before`` (see paging.page)."""

    columns: str
    column_params: list
    table: str
    where: str
    where_params: list
    order: str | None = BY_AGE_SQL
    late: bool = False
    since: str = "state_changed_at"

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


def _branch(
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
    """One branch of rows under one policy, written as SQL, or None (filtered out).

    Within a branch the response period is one constant, so due = since + period and the
    overdue rows are exactly the oldest: the branch's own order (oldest first) agrees with the
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
        # Mine: what I own directly, and what is in a queue I own (an item escalated away from
        # me to the backup owner is still in my queue): then the whole branch.
        mine = f"{owner} = {_int(filters.user_id)}"
        # Nobody's item is the admins' (recovery.ownership): in every admin's Mine.
        where.append(f"({mine} OR {owner} IS NULL)" if filters.user_is_admin else mine)
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
        order = order.replace(BY_AGE_SQL, BRANCH_ORDER_SQL[filters.sort])
    return Branch(
        columns=columns,
        column_params=column_params,
        table=table,
        where=" AND ".join(where),
        where_params=params,
        order=order,
        late=late,
        since=since,
    )


def _timestamp(value: datetime) -> str:
    """A datetime of ours written into the SQL (the reading's ``now``)."""
    return f"'{value.isoformat()}'::timestamptz"


def _int(value) -> str:
    """An integer (or NULL) written into the SQL: IDs only, never text from a request."""
    return "NULL::integer" if value is None else str(int(value))


def integration_rows() -> list[tuple[int, str]]:
    """(pk, name) of every integration: one query of a handful of rows."""
    return list(Integration.objects.order_by("pk").values_list("pk", "name"))


def branches(
    filters: Filters, now: datetime, policies: Policies | None = None, integrations=None
) -> list[Branch]:
    """The queue's branches: one Branch per part of the queue that the filters leave.

    Operations: one branch per state and integration (``integrations``: (pk, name) of every
    row, plus None), read through the partial index ``operation_queue`` (state, integration,
    state_changed_at) oldest first; split in two by ``action`` where the integration carries
    both customer-affecting and internal actions. Enquiries: one branch per queue, read
    through ``enquiry_queue``. Paused integrations: one branch per integration (a primary-key
    read). Without ``policies`` or ``integrations``, each is read here (one query each).
    """
    policies = policies or Policies.load()
    integrations = integration_rows() if integrations is None else integrations
    common = {"filters": filters, "now": now, "policies": policies}
    found = []
    actions = tuple(sorted(CUSTOMER_AFFECTING_ACTIONS))
    in_actions = "action IN (" + ", ".join(["%s"] * len(actions)) + ")"
    customer_op = (f"CASE WHEN {in_actions} THEN 1 ELSE 0 END", list(actions))
    for state in (OperationState.UNKNOWN, OperationState.FAILED):
        for integration_id, name in [*integrations, (None, None)]:
            if integration_id is None:
                # IS NULL is no equality to PostgreSQL: ordered by the index's own columns,
                # the integration-less branch is still read from operation_queue, oldest first.
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
                    _branch(
                        kind=KIND_OPERATION,
                        key="id",
                        queue=state,
                        table="ledger_operation",
                        where=part_where,
                        params=part_params,
                        integration_id=integration_id,
                        integration_name=name,
                        customer=customer,
                        order=order,
                        **common,
                    )
                )
    enquiry = {
        "kind": KIND_ENQUIRY,
        "key": "reference",
        "table": "intake_enquiry",
        "integration_id": None,
        "integration_name": None,
        **common,
    }
    for queue, where, params, customer, late in ENQUIRY_QUEUES:
        found.append(
            _branch(
                queue=queue, where=where, params=params, customer=customer, late=late, **enquiry
            )
        )
    # A resident's reply waiting for a person (intake.answers), through intake's partial index
    # answer_waiting (state, state_changed_at).
    found.append(
        _branch(
            kind=KIND_ANSWER,
            key="id",
            queue=Queue.WAITING_REPLY,
            table="intake_residentanswer",
            where="state IN (%s, %s)",
            params=[AnswerState.UNMATCHED, AnswerState.NOT_ATTACHED],
            integration_id=None,
            integration_name=None,
            customer=1,
            **common,
        )
    )
    for integration_id, name in integrations:
        # A handful of rows, each under its own policy: one primary-key read each.
        found.append(
            _branch(
                kind=KIND_INTEGRATION,
                key="name",
                queue=Queue.PAUSED,
                table="ledger_integration",
                where="id = %s AND (paused OR awaiting_backlog_review)",
                params=[integration_id],
                integration_id=integration_id,
                integration_name=name,
                customer=1,
                since=f"COALESCE(paused_at, {_timestamp(now)})",
                order=None,
                **common,
            )
        )
    return [b for b in found if b is not None]


def union(parts: list[tuple[str, list]]) -> tuple[str, list]:
    """The SELECTs of ``parts`` as one UNION ALL (each part's own ORDER BY and LIMIT kept)."""
    sql = " UNION ALL ".join(f"({part})" for part, _params in parts)
    return sql, [p for _part, params in parts for p in params]


def fetch(parts: list[tuple[str, list]], sort: str = "", *, offset=0, limit=None) -> list[dict]:
    """Rows offset..offset + limit (None: every one) of the union of ``parts`` in the queue's
    order (or the chosen ``sort``), as dicts of the union's columns."""
    sql, params = union(parts)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT * FROM ({sql}) AS queue ORDER BY {SORTS[sort][1]} LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def whole(now: datetime) -> tuple[str, list]:
    """The whole queue, unfiltered and unordered, as SQL for a query of its own around it (the
    dashboard's totals). Never empty of branches: the enquiry queues are always read."""
    return union([b.sql() for b in branches(Filters(), now)])


def all_rows(now=None, filters: Filters | None = None, *, limit=None) -> list[dict]:
    """Every queue row's columns under ``filters``, in the queue's order (or its sort), the
    first ``limit`` only when given: the escalation task, the drill, bulk actions on a group.
    The page's branches, each read whole."""
    now = now or timezone.now()
    filters = filters or Filters()
    parts = branches(filters, now)
    if not parts:
        return []
    return fetch([b.sql() for b in parts], filters.sort, limit=limit)
