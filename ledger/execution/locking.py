"""Locking an operation: the enquiry, then the operation, in one written-out statement.

Locks are always taken enquiry first, then operation, so the engine, the sweeper and intake's
revision edits never wait on each other in a circle.
"""

from __future__ import annotations

import copy
import functools
from contextlib import contextmanager

from django.db import connection, transaction

from config import roundtrip
from intake.models import Enquiry
from ledger import journal
from ledger.models import Operation

# The enquiry that owns an operation, locked, then the operation, locked, and (where asked) its
# integration, read unlocked: one written-out statement, one round trip. The enquiry's lock is
# taken inside the materialised WITH, the operation's by the outer FOR UPDATE OF op, which only
# sees a joined row once the enquiry is locked: the order is enquiry, then operation, as
# everywhere else. The operation's conditions are rechecked on its newest version once it is
# locked (READ COMMITTED), so a row that changed meanwhile is passed over, as before.
# Compiling the equivalent querysets (a Subquery; select_for_update with select_related), and
# then RawQuerySet's column mapping, were the largest items in a worker's CPU profile
# (docs/benchmarks.md), hence the statement and the plain row reader below.
# An operation with no enquiry (a message to an operator) has nothing to lock first: the outer
# join keeps its row, with the enquiry's columns NULL.
_LOCK_SQL = (
    "WITH enquiry AS MATERIALIZED (SELECT * FROM intake_enquiry WHERE id = "
    "(SELECT enquiry_id FROM ledger_operation WHERE id = %s) FOR UPDATE) "
    "SELECT {columns} FROM ledger_operation op LEFT JOIN enquiry ON op.enquiry_id = enquiry.id"
    "{join} WHERE op.id = %s{conditions} FOR UPDATE OF op{skip}"
)
_INTEGRATION_JOIN = (
    " LEFT JOIN ledger_integration integration ON integration.id = op.integration_id"
)


@contextmanager
def step():
    """One transaction of the engine: its writes (save_changed, the attempt, the journal rows,
    the queued tasks) sent to PostgreSQL together, at its end or before any read that follows
    them (config.roundtrip), the journal's rows in one statement (journal.deferred)."""
    with transaction.atomic(), roundtrip.together(), journal.deferred():
        yield


class _RowReader:
    """Model instances from a row of plain columns, as the ORM makes them (converters, from_db)."""

    def __init__(self, model, alias):
        self.model = model
        self.fields = model._meta.concrete_fields
        self.names = [f.attname for f in self.fields]
        self.columns = ", ".join(
            f"{alias}.{connection.ops.quote_name(f.column)}" for f in self.fields
        )
        self.converters = [
            (i, f.get_db_converters(connection))
            for i, f in enumerate(self.fields)
            if f.get_db_converters(connection)
        ]

    def read(self, row, start, *, locked=True):
        values = list(row[start : start + len(self.fields)])
        for i, converters in self.converters:
            for convert in converters:
                values[i] = convert(values[i], self.fields[i], connection)
        instance = self.model.from_db(connection.alias, self.names, values)
        if locked:  # only a locked row's snapshot may stand in for the state check
            _remember(instance, self.names, values)
        return instance


# What a row held when it was read here: save_changed() writes only the columns that differ.
_LOADED = "_handover_loaded"


def _remember(instance, names, values):
    # A JSON value is copied: a dict changed in place must still differ from what was read.
    setattr(
        instance,
        _LOADED,
        {
            name: copy.deepcopy(value) if isinstance(value, dict | list) else value
            for name, value in zip(names, values, strict=True)
        },
    )


def save_changed(instance):
    """Save what changed since the row was read by lock_operation: an UPDATE of
    those columns (and ``updated_at``), none when nothing changed. Whatever set them (a
    django-fsm transition sets the state, its timestamp and, for some, ``closed_at`` or
    ``attention``; the engine sets the rest), they are found by comparing, so none is left
    out. An instance read any other way (read_operation's, unlocked, too) is saved whole, as
    ``save()`` does, with django-fsm's state check.

    The UPDATE is written out (config.roundtrip.update: queued with the transaction's other
    writes inside ``roundtrip.together()``). An instance with a snapshot was read by
    lock_operation, so its row is locked (FOR UPDATE) and cannot have moved since: the state
    is not among the UPDATE's conditions (a snapshot taken before a plain ``save()`` of the
    same instance would be stale). An UPDATE that finds no row raises.

    The whole-row UPDATE rewrote every column: for an enquiry that means recomputing its
    stored search vector (intake.models.Enquiry.search_vector) on every transition, and for
    both a statement of 25-30 columns to build and send (docs/benchmarks.md, issue 29).
    """
    loaded = getattr(instance, _LOADED, None)
    if loaded is None:
        instance.save()
        return
    changed = [
        name
        for name, before in loaded.items()
        if name != "updated_at" and getattr(instance, name) != before
    ]
    if not changed:
        return
    fields = {f.attname: f.name for f in instance._meta.concrete_fields}
    update_fields = [fields[name] for name in changed]
    if "updated_at" in fields:
        update_fields.append("updated_at")
    roundtrip.update(instance, update_fields)
    _remember(instance, list(loaded), [getattr(instance, name) for name in loaded])


def _conditions(filters) -> str:
    """``AND op.<column> = %s`` for each of the caller's column = value conditions."""
    return "".join(f" AND op.{Operation._meta.get_field(name).column} = %s" for name in filters)


def _read_integration(op, integrations, row, start):
    # Read unlocked: no snapshot (save_changed saves it whole, should anything save it).
    op.integration = (
        integrations.read(row, start, locked=False) if op.integration_id is not None else None
    )


@functools.cache
def _readers():
    from ledger.models import Integration

    return (
        _RowReader(Enquiry, "enquiry"),
        _RowReader(Operation, "op"),
        _RowReader(Integration, "integration"),
    )


def lock_operation(op_id, *, skip_locked=False, with_integration=False, **filters):
    """Lock the enquiry, then the operation (the one lock order everywhere): (enquiry, op).

    ``filters``: column = value conditions the operation must meet (``state=``, ``held=``);
    with ``skip_locked`` an operation another transaction holds is passed over. (None, None)
    when no operation meets them. ``with_integration``: the operation's integration is read in
    the same statement (unlocked); otherwise it is read when first used.
    """
    pk = Operation._meta.pk.to_python(op_id)  # a malformed ID fails as the ORM's would
    enquiries, operations, integrations = _readers()
    columns = [enquiries.columns, operations.columns]
    if with_integration:
        columns.append(integrations.columns)
    sql = _LOCK_SQL.format(
        columns=", ".join(columns),
        join=_INTEGRATION_JOIN if with_integration else "",
        conditions=_conditions(filters),
        skip=" SKIP LOCKED" if skip_locked else "",
    )
    with roundtrip.prepared_cursor() as cursor:
        cursor.execute(sql, [pk, pk, *filters.values()])
        row = cursor.fetchone()
    if row is None:
        return None, None
    op = operations.read(row, len(enquiries.fields))
    enquiry = enquiries.read(row, 0) if op.enquiry_id is not None else None
    op.enquiry = enquiry
    if with_integration:
        _read_integration(op, integrations, row, len(enquiries.fields) + len(operations.fields))
    return enquiry, op


_READ_SQL = "SELECT {columns} FROM ledger_operation op{join} WHERE op.id = %s{conditions}"


def read_operation(op_id, **filters):
    """The operation and its integration, unlocked, in one statement (None when ``filters``,
    column = value conditions, do not hold): what a lookup needs before it asks anyone."""
    pk = Operation._meta.pk.to_python(op_id)
    _, operations, integrations = _readers()
    sql = _READ_SQL.format(
        columns=f"{operations.columns}, {integrations.columns}",
        join=_INTEGRATION_JOIN,
        conditions=_conditions(filters),
    )
    with roundtrip.prepared_cursor() as cursor:
        cursor.execute(sql, [pk, *filters.values()])
        row = cursor.fetchone()
    if row is None:
        return None
    op = operations.read(row, 0, locked=False)
    _read_integration(op, integrations, row, len(operations.fields))
    return op
