"""Putting ledger work on django-q2: the transport, never the truth.

Tasks carry only an ID: an operation's, or for the receipt's task (ledger.receipt) the
enquiry's; never personal data. With the ORM broker (the default) the task row is inserted in
the caller's transaction, so "approve and enqueue" commit or roll back together. Another broker
(Redis) cannot join the transaction, so the task is pushed on commit instead; a crash between
the commit and the push loses only the task, and the sweeper re-enqueues it.

Delays (backoff, a settle delay): the ORM broker hands out a task only once its ``lock`` time
has passed, so a delayed task is a queue row whose lock lies in the future. That is exact and
costs no sleeping worker. With another broker a delayed task is not pushed at all: the
operation keeps its ``next_attempt_at`` and the sweeper (every minute) enqueues it when due.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from time import monotonic, sleep

from django.db import transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.signing import BadSignature, SignedPackage
from django_q.tasks import async_task

from config import roundtrip

logger = logging.getLogger("ledger.queueing")

EXECUTE = "ledger.tasks.execute_operation"
RECONCILE = "ledger.tasks.reconcile_operation"
OPERATION_TASKS = (EXECUTE, RECONCILE)
RECEIPT = "ledger.tasks.take_up_receipt"  # its argument is an enquiry ID (ledger.receipt)
ORM_BROKER = "ledger.queueing.OrmBroker"


class OrmBroker(ORM):
    """django-q2's ORM broker (Q_CLUSTER["broker_class"]), taking tasks in one statement.

    django-q2's own dequeue reads up to ``bulk`` rows, then locks each with an UPDATE of its
    own, each statement preceded by a connection health check. This one locks and returns
    the same rows with one UPDATE ... RETURNING, skipping rows another pusher holds. What a
    lock means is unchanged: a task is handed out again once its lock (``retry`` seconds)
    has passed without an acknowledgement. The acknowledgement is one DELETE, without the
    ORM's deletion collector. Both run once per task (the dequeue once per ``bulk`` tasks when
    that many are due): together they were about a fifth of the cluster's CPU per delivered
    operation (docs/benchmarks.md).
    """

    CHECK_SECONDS = 1.0
    _checked_at: float | None = None

    def _run(self, sql: str, params: list, fetch: bool = False):
        """``sql`` on the broker's connection; its rows if ``fetch``.

        Django's stale-connection check (``close_old_connections``: CONN_MAX_AGE, and the
        health check, a ``SELECT 1``, that CONN_HEALTH_CHECKS then runs before the next
        statement) once per CHECK_SECONDS at most, not before every statement: a pusher and
        a monitor run a statement per task, and the check was a round trip of its own before
        each (docs/benchmarks.md, "The transport's cost per task"). What the check before each
        statement gave, a broken connection (a restarted server) replaced before use, the
        failed statement now gives: the check then closes that connection and the statement
        runs once more on a new one. Each statement here may run twice (rows locked twice are
        handed out once their lock passes, as after a pusher's death; a DELETE twice deletes
        once).
        """
        from django.db import InterfaceError, OperationalError, connections

        now = monotonic()
        if self._checked_at is None or now - self._checked_at >= self.CHECK_SECONDS:
            ORM.get_connection()  # the ORM broker's own stale-connection check
            self._checked_at = now
        connection = connections[Conf.ORM]
        try:
            return self._execute(connection, sql, params, fetch)
        except (OperationalError, InterfaceError):
            ORM.get_connection()  # the error marked the connection: checked, closed if broken
            self._checked_at = monotonic()
            if connection.connection is not None:
                raise  # the connection works: the statement itself failed
            logger.warning("the queue's database connection was broken; statement run again")
            return self._execute(connection, sql, params, fetch)

    @staticmethod
    def _execute(connection, sql, params, fetch):
        with roundtrip.prepared_cursor(connection.alias) as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if fetch else None

    def dequeue(self):
        from django_q.models import OrmQ

        now = timezone.now()
        table = OrmQ._meta.db_table
        # The picked rows in a MATERIALIZED CTE, read once: as `id IN (subquery)` the planner
        # may rescan the subquery (a nested-loop semi-join), and a rescan skips the row this
        # statement has just locked and takes the next one, handing out more than BULK tasks
        # (seen in the suite: two for a BULK of 1).
        tasks = self._run(
            f"WITH picked AS MATERIALIZED (SELECT id FROM {table} "
            'WHERE "key" = %s AND "lock" < %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) '
            f'UPDATE {table} SET "lock" = %s FROM picked WHERE {table}.id = picked.id '
            f"RETURNING {table}.id, {table}.payload",
            [self.list_key, now, Conf.BULK, self.timeout(None)],
            fetch=True,
        )
        if tasks:
            return sorted(tasks)
        sleep(Conf.POLL)  # empty queue: spare the CPU, as django-q2 does
        return None

    def acknowledge(self, task_id):
        from django_q.models import OrmQ

        self._run(f"DELETE FROM {OrmQ._meta.db_table} WHERE id = %s", [task_id])


class _DelayedOrmBroker(ORM):
    """The ORM broker, enqueueing a task that becomes visible at ``not_before``."""

    def __init__(self, not_before):
        super().__init__(list_key=Conf.CLUSTER_NAME)
        self.not_before = not_before

    def enqueue(self, task):
        package = self.get_connection().create(
            key=self.list_key, payload=task, lock=self.not_before
        )
        return package.pk


class _CollectingOrmBroker(ORM):
    """The ORM broker, keeping each task row to be inserted with the others (see batched());
    ``not_before``: a delayed task's lock, as _DelayedOrmBroker writes it."""

    def __init__(self, rows, not_before=None):
        super().__init__(list_key=Conf.CLUSTER_NAME)
        self.rows = rows
        self.not_before = not_before

    def enqueue(self, task):
        from django_q.models import OrmQ

        lock = self.not_before or timezone.now()
        self.rows.append(OrmQ(key=self.list_key, payload=task, lock=lock))
        return None


# Task rows that enqueue() collects inside a batched() block (ORM broker only).
_batch: ContextVar[list | None] = ContextVar("queue_batch", default=None)


@contextmanager
def batched():
    """Insert the task rows this block enqueues in one statement at its end (ORM broker).

    The same rows django-q2's ORM broker writes one at a time, for a path that enqueues
    several in one transaction (the receipt, a released backlog). Other brokers are unchanged.
    """
    if _batch.get() is not None or not uses_orm_broker():
        yield
        return
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("queueing.batched() must run inside transaction.atomic()")
    rows: list = []
    token = _batch.set(rows)
    try:
        yield
    finally:
        _batch.reset(token)
    roundtrip.insert(rows, using=Conf.ORM)


def uses_orm_broker() -> bool:
    return bool(Conf.ORM) and Conf.BROKER_CLASS in (None, "", ORM_BROKER)


def enqueue(operation, func: str = EXECUTE, *, at=None, save=True) -> bool:
    """Queue ``func(operation.pk)``, at ``at`` or now. Returns False when left to the sweeper.

    Call inside the transaction that made the operation runnable. ``save=False``: only set
    ``task_enqueued_at`` on the instance, for a caller that saves the row right after (one
    UPDATE instead of two on the intake and approval paths).
    """
    now = timezone.now()
    if not _push(func, str(operation.pk), at if at is not None and at > now else None):
        return False  # the sweeper enqueues it once next_attempt_at has passed
    operation.task_enqueued_at = now
    if save:
        # Only this column, as a queryset's update(): the instance may hold a transition its
        # caller has not saved yet.
        meta = type(operation)._meta
        roundtrip.execute(
            f"UPDATE {meta.db_table} SET task_enqueued_at = %s WHERE {meta.pk.column} = %s",
            [now, operation.pk],
        )
    return True


def enqueue_receipt(enquiry) -> None:
    """Queue the receipt's task for ``enquiry``; call inside the transaction that stored it."""
    _push(RECEIPT, str(enquiry.pk), None)


def _push(func: str, arg: str, at) -> bool:
    """``func(arg)`` on the queue: in the caller's transaction with the ORM broker (at ``at``
    if given), on commit with another; False for a delayed task another broker cannot hold."""
    if uses_orm_broker():
        options = {"task_name": f"{func.rsplit('.', 1)[1]}:{arg}", "group": "ledger"}
        rows = _batch.get()
        # Outside batched() but inside a config.roundtrip block: this task's row is queued
        # with the transaction's other writes.
        own = rows is None and roundtrip.is_open()
        if own:
            rows = []
        if rows is not None:
            options["broker"] = _CollectingOrmBroker(rows, at)
        elif at is not None:
            options["broker"] = _DelayedOrmBroker(at)
        async_task(func, arg, q_options=options)
        if own:
            roundtrip.insert(rows, using=Conf.ORM)
    elif at is not None:
        return False
    else:
        transaction.on_commit(lambda: async_task(func, arg, q_options={"group": "ledger"}))
    return True


def live_tasks() -> dict[str, set[str]] | None:
    """{operation or enquiry id: {task functions}} for every readable queued ledger task; None
    if unknowable.

    A payload this process cannot verify (signed under another SECRET_KEY) is not live: the
    cluster will drop it unread, so the sweeper must treat its operation as having no task.
    """
    if not uses_orm_broker():
        return None
    from django_q.models import OrmQ

    live: dict[str, set[str]] = {}
    unreadable = 0
    for payload in (
        OrmQ.objects.using(Conf.ORM).filter(key=Conf.CLUSTER_NAME).values_list("payload", flat=True)
    ):
        try:
            task = SignedPackage.loads(payload)
        except (BadSignature, TypeError, ValueError):
            unreadable += 1
            continue
        func = task.get("func")
        args = task.get("args") or ()
        if (func in OPERATION_TASKS or func == RECEIPT) and args:
            live.setdefault(str(args[0]), set()).add(func)
    if unreadable:
        logger.warning("%s queued task(s) cannot be verified (SECRET_KEY changed?)", unreadable)
    return live
