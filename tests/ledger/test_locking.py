"""ledger.execution.lock_operation: one statement, the one lock order, real concurrent sessions.

Each test holds a row lock in a second database session (a thread with its own connection)
and looks at what PostgreSQL itself reports (pg_locks, pg_stat_activity, NOWAIT): nothing here
is timed.
"""

import threading
import uuid

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from ledger.execution import lock_operation
from ledger.models import Operation, OperationState
from tests.ledger.factories import make_operation

pytestmark = pytest.mark.django_db(transaction=True)


class Session(threading.Thread):
    """Runs ``steps`` in a transaction on its own connection; holds it until ``release()``."""

    def __init__(self, *steps):
        super().__init__(daemon=True)
        self.steps = steps
        self.holding = threading.Event()
        self._release = threading.Event()
        self.pid = None
        self.result = None
        self.error = None

    def run(self):
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    self.pid = cursor.fetchone()[0]
                for step in self.steps:
                    self.result = step()
                self.holding.set()
                self._release.wait(30)
        except Exception as exc:  # reported by the test, in its own thread
            self.error = exc
        finally:
            self.holding.set()
            connections.close_all()

    def release(self):
        self._release.set()
        self.join(30)
        assert not self.is_alive(), "the second session did not finish"
        if self.error is not None:
            raise self.error


def _sql(statement, params):
    def step():
        with connection.cursor() as cursor:
            cursor.execute(statement, params)

    return step


def _lock_enquiry(enquiry):
    return _sql("SELECT 1 FROM intake_enquiry WHERE id = %s FOR UPDATE", [enquiry.pk])


def _lock_operation_row(op):
    return _sql("SELECT 1 FROM ledger_operation WHERE id = %s FOR UPDATE", [op.pk])


def _waiting_on_a_lock(session):
    def check():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [session.pid]
            )
            row = cursor.fetchone()
        return row is not None and row[0] == "Lock"

    return check


def _enquiry_is_locked(enquiry) -> bool:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT 1 FROM intake_enquiry WHERE id = %s FOR UPDATE NOWAIT", [enquiry.pk]
            )
    except OperationalError:
        return True
    return False


@pytest.fixture
def operation(make_enquiry, integrations):
    enquiry = make_enquiry()
    return make_operation(enquiry, "approved", integration=integrations["crm"])


def test_one_statement_reads_the_enquiry_the_operation_and_its_integration(operation):
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        enquiry, op = lock_operation(
            operation.pk, skip_locked=True, with_integration=True, state=OperationState.APPROVED
        )
        # Everything the claim reads comes with the row: no further statement.
        assert op.integration.name == "crm"
        assert op.enquiry is enquiry
    statements = [q["sql"] for q in queries.captured_queries]
    assert len([s for s in statements if s.startswith("WITH")]) == 1, statements
    assert len(statements) == 1, statements  # (BEGIN and COMMIT are not statements here)
    stored = Operation.objects.get(pk=operation.pk)
    # The values are the ORM's own: JSON decoded, UUIDs and aware datetimes as models hold them.
    for field in Operation._meta.concrete_fields:
        assert getattr(op, field.attname) == getattr(stored, field.attname), field.name
    assert op.payload == {"reference": enquiry.reference}
    assert isinstance(op.pk, uuid.UUID) and op.created_at.tzinfo is not None
    assert enquiry.pk == operation.enquiry_id and enquiry.reference == operation.enquiry.reference
    assert not op._state.adding and op._state.db == "default"


def test_every_field_read_equals_the_orms(operation):
    """The enquiry, the operation and the integration a lock returns hold, field by field, what
    Django's ORM loads for the same rows (ledger.execution reads them from the row itself)."""
    from intake.models import Enquiry
    from ledger.models import Integration

    Enquiry.objects.filter(pk=operation.enquiry_id).update(documents=[{"name": "ünïcödé.pdf"}])
    with transaction.atomic():
        enquiry, op = lock_operation(operation.pk, with_integration=True)
    for row, model in ((enquiry, Enquiry), (op, Operation), (op.integration, Integration)):
        stored = model.objects.get(pk=row.pk)
        for field in model._meta.concrete_fields:
            value = getattr(row, field.attname)
            assert value == getattr(stored, field.attname), (model.__name__, field.name)
            assert type(value) is type(getattr(stored, field.attname)), (model.__name__, field.name)
    assert enquiry.documents == [{"name": "ünïcödé.pdf"}]


@pytest.mark.parametrize("model_name", ["intake.Enquiry", "ledger.Operation", "ledger.Integration"])
def test_the_orm_converts_these_columns_with_the_fields_own_converters_only(model_name):
    """What ledger.execution's row reader relies on, so that a Django or psycopg upgrade that
    changes it fails here: the ORM selects a model's concrete fields in that order and converts
    each value with the field's own converters (Field.get_db_converters, e.g. JSONField's
    from_db_value) and nothing from the backend; Model.from_db takes the values in that order.
    The reader applies exactly those converters to the same columns, then Model.from_db."""
    from django.apps import apps

    model = apps.get_model(model_name)
    fields = model._meta.concrete_fields
    compiler = model.objects.all().query.get_compiler(connection=connection)
    compiler.setup_query()
    assert [col.target for col, _sql, _alias in compiler.select] == list(fields)
    table = model._meta.db_table
    converters = compiler.get_converters([f.get_col(table) for f in fields])
    assert {i: list(found) for i, (found, _expression) in converters.items()} == {
        i: f.get_db_converters(connection)
        for i, f in enumerate(fields)
        if f.get_db_converters(connection)
    }
    names = [f.attname for f in fields]
    instance = model.from_db(connection.alias, names, [f.get_default() for f in fields])
    assert not instance._state.adding and instance._state.db == connection.alias


def test_the_rows_read_save_as_loaded_rows_do(operation):
    with transaction.atomic():
        enquiry, op = lock_operation(operation.pk, state=OperationState.APPROVED)
        op.submit(actor="system:test", reason="claimed")
        op.save()  # the concurrent-transition guard saw "approved" as the loaded state
        enquiry.message = "overwritten"
        with pytest.raises(ValueError, match="never overwritten"):
            enquiry.save()
    assert Operation.objects.get(pk=operation.pk).state == OperationState.SUBMITTED


def test_no_operation_meeting_the_conditions_is_none(operation):
    assert lock_operation(operation.pk, state=OperationState.UNKNOWN) == (None, None)
    assert lock_operation(uuid.uuid4()) == (None, None)


def test_the_enquiry_is_locked_before_the_operation(operation, wait_for):
    holder = Session(_lock_operation_row(operation))
    holder.start()
    holder.holding.wait(30)
    locker = Session(lambda: lock_operation(operation.pk))
    locker.start()
    try:
        wait_for(_waiting_on_a_lock(locker), message="lock_operation to wait on the operation")
        # While it waits for the operation, it already holds the enquiry.
        assert _enquiry_is_locked(operation.enquiry)
    finally:
        holder.release()
    locker.release()
    assert locker.result[1].pk == operation.pk


def test_skip_locked_passes_over_a_held_operation_without_waiting(operation):
    holder = Session(_lock_operation_row(operation))
    holder.start()
    holder.holding.wait(30)
    try:
        with transaction.atomic():
            assert lock_operation(
                operation.pk, skip_locked=True, state=OperationState.APPROVED
            ) == (None, None)
    finally:
        holder.release()
    with transaction.atomic():
        assert (
            lock_operation(operation.pk, skip_locked=True, state=OperationState.APPROVED)[1]
            is not None
        )


def test_a_held_enquiry_is_waited_for_and_the_conditions_rechecked_after(operation, wait_for):
    """Another session holds the enquiry and changes the operation: the claim waits (it never
    skips an enquiry), then sees the committed state and finds nothing to claim."""
    holder = Session(
        _lock_enquiry(operation.enquiry),
        _sql("UPDATE ledger_operation SET state = 'cancelled' WHERE id = %s", [operation.pk]),
    )
    holder.start()
    holder.holding.wait(30)
    claimer = Session(
        lambda: lock_operation(
            operation.pk, skip_locked=True, state=OperationState.APPROVED, held=False
        )
    )
    claimer.start()
    try:
        wait_for(_waiting_on_a_lock(claimer), message="the claim to wait on the enquiry")
    finally:
        holder.release()
    claimer.release()
    assert claimer.result == (None, None)
