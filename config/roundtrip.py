"""A transaction's writes in one round trip, as prepared statements.

Inside ``together()``, the writes made through this module (``insert``, ``update``,
``execute``) are queued instead of run, and go to PostgreSQL together, in one round trip
(psycopg's pipeline: each statement's messages, then one Sync): when the block ends, or just
before any other statement the connection runs inside the block, so a read in the block always
sees every write queued before it. Outside a block they run at once. Either way the statements
are the same, and so is what they leave in the database.

Every statement sent from here (and through ``prepared_cursor()``, which the engine's lock, the
queue's broker and the rate limiter use for their own fixed statements) binds its parameters
server-side and is prepared on the connection the first time it runs (psycopg keeps the 100
most recent per connection): PostgreSQL then parses and plans it once per connection, not at
every call. Django's own cursors bind client-side and prepare nothing; for them this changes
nothing. Planning was about half of PostgreSQL's CPU per delivery (docs/benchmarks.md,
"Prepared statements"). ``DB_PREPARED_STATEMENTS=0`` (config/settings.py) turns preparing off
for a pooler that cannot keep a session's prepared statements; the statements still bind
server-side and still go together.

Why: on the engine's and intake's hot paths each transaction writes four to six rows, and each
ORM ``save()`` or ``bulk_create()`` builds its SQL through the compiler and waits for its own
round trip. Written out once per model and sent together, the same rows cost a fraction of the
CPU (docs/benchmarks.md, "Delivery's cost per operation").

What ``insert`` and ``update`` write is what the ORM's ``save()`` writes for the same instance:
each field's value as the field prepares it (``pre_save``, then ``get_db_prep_save``, as
Django's compilers ask), so ``auto_now`` stamps, defaults and JSON encoding are the model's own.
They do not send ``pre_save``/``post_save`` (no receiver in Handover listens for the models
written this way: tests/foundation/test_roundtrip.py checks) and they call no ``save()``
override: a model that guards its saves exposes the guard as ``before_write(fields)`` and
``after_write()``, which both paths run.

An error in a queued statement surfaces where the batch is sent: at the end of the block, or
at the statement that made it flush. Either way it is inside the transaction, which then rolls
back whole. Like ``journal.deferred()``, a block is not for code that rolls back a savepoint
and carries on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager
from contextvars import ContextVar

import psycopg
from django.db import DatabaseError, connections
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import Model


class _Batch:
    def __init__(self, alias):
        self.alias = alias
        self.statements: list[tuple[str, list, Callable | None]] = []

    def add(self, sql, params, then):
        self.statements.append((sql, params, then))

    def flush(self):
        if not self.statements:
            return
        statements, self.statements = self.statements, []
        if len(statements) == 1:
            _run(self.alias, *statements[0])
            return
        connection = connections[self.alias]
        cursors = [_cursor(self.alias) for _ in statements]
        try:
            # Sent as one: the pipeline's Sync goes at the block's end, and its results come
            # back together; an error in any statement is raised here, inside the transaction.
            with connection.wrap_database_errors, connection.connection.pipeline():
                for cursor, (sql, params, _) in zip(cursors, statements, strict=True):
                    cursor.execute(sql, params)
            for cursor, (_, _, then) in zip(cursors, statements, strict=True):
                if then is not None:
                    then(cursor)
        finally:
            for cursor in cursors:
                cursor.close()

    def before_other_statements(self, execute, sql, params, many, context):
        self.flush()  # its own statement passes here too, with nothing left to send
        return execute(sql, params, many, context)


_open: ContextVar[_Batch | None] = ContextVar("roundtrip_batch", default=None)


@contextmanager
def together(using: str = "default"):
    """Send the writes queued in this block in one round trip (see the module's docstring).

    Use it inside ``transaction.atomic()``. A nested block joins the outer one.
    """
    if _open.get() is not None:
        yield
        return
    connection = connections[using]
    if not connection.in_atomic_block:
        raise RuntimeError("roundtrip.together() must run inside transaction.atomic()")
    batch = _Batch(using)
    token = _open.set(batch)
    try:
        with connection.execute_wrapper(batch.before_other_statements):
            yield
            batch.flush()
    finally:
        _open.reset(token)


def is_open() -> bool:
    return _open.get() is not None


def execute(sql: str, params: list, then: Callable | None = None, using: str = "default"):
    """Run ``sql`` (queued inside a block); ``then(cursor)`` is called with the cursor on the
    statement's own result once it has run."""
    batch = _open.get()
    if batch is not None and batch.alias == using:
        batch.add(sql, list(params), then)
        return
    _run(using, sql, list(params), then)


def _run(using, sql, params, then):
    with prepared_cursor(using) as cursor:
        cursor.execute(sql, params)
        if then is not None:
            then(cursor)


# ---- model rows ------------------------------------------------------------------------------

_INSERTS: dict = {}


def _insert_fields(model):
    """The fields an INSERT names (an auto-increment key and generated columns are the
    database's) and the key to read back, if the database makes it."""
    if model not in _INSERTS:
        meta = model._meta
        fields = [
            f
            for f in meta.concrete_fields
            if not f.generated and not (f.primary_key and f.db_returning)
        ]
        returning = meta.pk if meta.pk.db_returning else None
        _INSERTS[model] = (fields, returning)
    return _INSERTS[model]


def insert(instances: Iterable[Model], using: str = "default") -> None:
    """INSERT the new ``instances`` (all of one model) in one statement, as ``save()`` (one)
    or ``bulk_create()`` (several) would; a key the database makes is set on each once the
    statement has run."""
    instances = list(instances)
    if not instances:
        return
    model = type(instances[0])
    connection = connections[using]
    quote = connection.ops.quote_name
    fields, returning = _insert_fields(model)
    params: list = []
    for instance in instances:
        if type(instance) is not model:
            raise TypeError("roundtrip.insert() takes rows of one model")
        _before_write(instance, None)
        params.extend(f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields)
    row = f"({', '.join(['%s'] * len(fields))})"
    sql = (
        f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([row] * len(instances))}"
    )

    def written(cursor):
        if returning is not None:
            for instance, (pk,) in zip(instances, cursor.fetchall(), strict=True):
                setattr(instance, returning.attname, pk)
        elif cursor.rowcount != len(instances):
            raise DatabaseError(f"{model.__name__}: {cursor.rowcount} of {len(instances)} rows")

    if returning is not None:
        sql += f" RETURNING {quote(returning.column)}"
    for instance in instances:
        instance._state.adding = False
        instance._state.db = using
        _after_write(instance)
    execute(sql, params, written, using)


def update(instance: Model, fields: Iterable[str], using: str = "default") -> None:
    """UPDATE ``fields`` (names, as ``save(update_fields=...)`` takes them) of ``instance``'s
    row, with ``auto_now`` fields stamped as the ORM stamps them when they are among
    ``fields``. An UPDATE that finds no row raises, as ``save(update_fields=...)`` does."""
    meta = type(instance)._meta
    connection = connections[using]
    quote = connection.ops.quote_name
    chosen = [meta.get_field(name) for name in fields]
    _before_write(instance, [f.name for f in chosen])
    assignments = [f"{quote(field.column)} = %s" for field in chosen]
    params = [
        field.get_db_prep_save(field.pre_save(instance, False), connection) for field in chosen
    ]
    params.append(meta.pk.get_db_prep_value(instance.pk, connection))
    sql = (
        f"UPDATE {quote(meta.db_table)} SET {', '.join(assignments)} "
        f"WHERE {quote(meta.pk.column)} = %s"
    )
    label = f"{meta.object_name} {instance.pk}"

    def written(cursor):
        if cursor.rowcount != 1:
            raise DatabaseError(f"{label}: the UPDATE found no row")

    _after_write(instance)
    execute(sql, params, written, using)


def _before_write(instance, fields):
    guard = getattr(instance, "before_write", None)
    if guard is not None:
        guard(fields)


def _after_write(instance):
    after = getattr(instance, "after_write", None)
    if after is not None:
        after()
    # As django-fsm's ConcurrentTransitionMixin.save() does after every save: the state as
    # written is the state a later save must find (tests/foundation/test_roundtrip.py pins it).
    update_initial_state = getattr(instance, "_update_initial_state", None)
    if update_initial_state is not None:
        update_initial_state()


# ---- prepared statements ---------------------------------------------------------------------


class _Preparing(psycopg.Cursor):
    """psycopg's server-side binding cursor, preparing each statement on first use (a no-op
    where the connection's ``prepare_threshold`` is None: DB_PREPARED_STATEMENTS=0)."""

    def execute(self, query, params=None, *, prepare=True, binary=None):
        return super().execute(query, params, prepare=prepare, binary=binary)


class _Logged(CursorDebugWrapper):
    # Django's debug wrapper logs the query a client-side cursor composed; this cursor composed
    # none (its parameters travel apart), so the log gets the statement with its values here.
    def execute(self, sql, params=None):
        try:
            logged = self.db.ops.compose_sql(sql, params)
        except Exception:  # a value psycopg cannot quote: the execution itself will say why
            logged = sql
        with self.debug_sql(logged):
            return CursorWrapper.execute(self, sql, params)


def _cursor(using):
    # What Django's own cursor() does around the cursor it makes: the health check
    # (CONN_HEALTH_CHECKS), the connection, and the wrapper (the execute wrappers, so a block's
    # queue is sent before any other statement; the query log; errors as Django's).
    connection = connections[using]
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        raw = _Preparing(connection.connection)
    return _Logged(raw, connection) if connection.queries_logged else CursorWrapper(raw, connection)


@contextmanager
def prepared_cursor(using: str = "default"):
    """A cursor whose statements are prepared on the connection the first time each runs
    (see the module's docstring): for fixed statements run often, with ``%s`` parameters.
    Not for statements whose text changes with their values (an ``IN`` list of varying
    length): each text takes a place in the connection's cache."""
    with _cursor(using) as cursor:
        yield cursor
