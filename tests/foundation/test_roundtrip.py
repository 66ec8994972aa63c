"""config.roundtrip: a transaction's writes in one round trip, the rows the ORM's own saves
write, and every read in the block seeing the writes queued before it."""

import uuid

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import signals
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ

from config import roundtrip
from intake.models import Enquiry, Revision
from ledger.models import Attempt, JournalEntry, Operation
from tests import wire
from tests.intake.factories import EnquiryFactory
from tests.ledger.factories import make_operation

pytestmark = pytest.mark.django_db

WRITTEN_OUT = (Enquiry, Operation, Attempt, JournalEntry, OrmQ)
OWN = {"id", "updated_at"}


def _row(model, pk, skip=OWN):
    return {k: v for k, v in model.objects.filter(pk=pk).values().get().items() if k not in skip}


def test_no_model_written_out_has_a_save_signal_receiver():
    """roundtrip writes rows without save(): a receiver of pre_save/post_save would be skipped."""
    for model in WRITTEN_OUT:
        for signal in (signals.pre_save, signals.post_save):
            assert not signal.has_listeners(model), (model, signal)


STARTED = timezone.now()


def _attempt(op, number):
    return Attempt(
        operation=op,
        number=number,
        kind="call",
        worker="system:test",
        started_at=STARTED,
        request_summary={"reference": "ENQ-1", "ü": [1, None]},
    )


def _entry(enquiry, action):
    return JournalEntry(
        subject_type="intake.enquiry",
        subject_id=str(enquiry.pk),
        enquiry=enquiry,
        action=action,
        actor="system:test",
        kept_reason="reason ü",
        at=STARTED,
        evidence={"a": [1, "\u00e9"]},
    )


def test_inserts_write_the_rows_save_and_bulk_create_write():
    op = make_operation(EnquiryFactory(), "approved")
    by_orm = _attempt(op, 1)
    by_orm.save()
    fast = _attempt(op, 2)
    with transaction.atomic():
        roundtrip.insert([fast])
    assert fast.pk is not None and not fast._state.adding
    skip = OWN | {"number"}
    assert _row(Attempt, fast.pk, skip) == _row(Attempt, by_orm.pk, skip)

    rows = [_entry(op.enquiry, "test.one"), _entry(op.enquiry, "test.two")]
    orm_rows = [_entry(op.enquiry, "test.one"), _entry(op.enquiry, "test.two")]
    JournalEntry.objects.bulk_create(orm_rows)
    roundtrip.insert(rows)
    assert [r.pk for r in rows] == sorted(r.pk for r in rows)  # read back in order
    for fast_row, orm_row in zip(rows, orm_rows, strict=True):
        assert _row(JournalEntry, fast_row.pk) == _row(JournalEntry, orm_row.pk)


def test_an_update_writes_what_save_update_fields_writes():
    a = make_operation(EnquiryFactory(), "approved")
    b = make_operation(EnquiryFactory(), "approved")
    changes = {"attempt_count": 3, "result": {"ü": [1, {"x": None}]}, "attention": "auth"}
    with transaction.atomic():
        for op in (a, b):
            op.submit(actor="system:test", reason="attempt 1")
            for name, value in changes.items():
                setattr(op, name, value)
        fields = ["state", "state_changed_at", *changes, "updated_at"]
        a.save(update_fields=fields)
        roundtrip.update(b, fields)
    skip = OWN | {"enquiry_id", "idempotency_key", "payload", "payload_hash", "created_at"}
    skip |= {"state_changed_at"}
    assert _row(Operation, b.pk, skip) == _row(Operation, a.pk, skip)
    assert Operation.objects.get(pk=b.pk).state == "submitted"
    # updated_at was stamped as auto_now stamps it, and the instance holds what was written.
    assert Operation.objects.get(pk=b.pk).updated_at == b.updated_at


def test_writes_in_a_block_go_in_one_round_trip_at_its_end():
    op = make_operation(EnquiryFactory(), "approved")
    with wire.sent(connection) as sent, transaction.atomic(), roundtrip.together():
        roundtrip.insert([_attempt(op, 1)])
        roundtrip.insert([_entry(op.enquiry, "test.a"), _entry(op.enquiry, "test.b")])
        op.attempt_count = 1
        roundtrip.update(op, ["attempt_count", "updated_at"])
        assert Attempt.objects.filter(operation=op).count() == 1  # flushed first
        roundtrip.insert([_attempt(op, 2)])
    exchanges = sent.without("SAVEPOINT", "RELEASE", "ROLLBACK")
    # The three queued writes together, the read, then the last write at the block's end.
    assert [[s.split()[0] for s in ex] for ex in exchanges] == [
        ["INSERT", "INSERT", "UPDATE"],
        ["SELECT"],
        ["INSERT"],
    ], exchanges
    assert Attempt.objects.filter(operation=op).count() == 2
    assert Operation.objects.get(pk=op.pk).attempt_count == 1


def test_each_written_out_statement_is_prepared_once_per_connection():
    """PostgreSQL parses and plans a statement sent from here once per connection; later runs
    bind it by name (config.roundtrip, "prepared statements")."""
    op = make_operation(EnquiryFactory(), "approved")
    with wire.sent(connection) as sent:
        for number in (1, 2, 3):
            with transaction.atomic(), roundtrip.together():
                roundtrip.insert([_attempt(op, number)])
                op.attempt_count = number
                roundtrip.update(op, ["attempt_count"])
    assert len(sent.prepared) == 2, sent.prepared
    assert sent.prepared[0].startswith('INSERT INTO "ledger_attempt"')
    assert sent.prepared[1].startswith('UPDATE "ledger_operation" SET "attempt_count"')
    writes = sent.without("SAVEPOINT", "RELEASE", "ROLLBACK")
    assert len(writes) == 3 and all(len(ex) == 2 for ex in writes), writes
    assert Attempt.objects.filter(operation=op).count() == 3


def test_with_preparing_off_the_statements_still_go_together_unprepared():
    """DB_PREPARED_STATEMENTS=0 leaves the connection's prepare_threshold None (Django's
    default): for a pooler that cannot keep a session's prepared statements."""
    op = make_operation(EnquiryFactory(), "approved")
    connection.ensure_connection()
    raw = connection.connection
    threshold, raw.prepare_threshold = raw.prepare_threshold, None
    try:
        with wire.sent(connection) as sent:
            for number in (1, 2):
                with transaction.atomic(), roundtrip.together():
                    roundtrip.insert([_attempt(op, number)])
                    op.attempt_count = number
                    roundtrip.update(op, ["attempt_count"])
    finally:
        raw.prepare_threshold = threshold
    assert sent.prepared == []
    writes = sent.without("SAVEPOINT", "RELEASE", "ROLLBACK")
    assert len(writes) == 2 and all(len(ex) == 2 for ex in writes), writes
    assert Attempt.objects.filter(operation=op).count() == 2


def test_the_query_log_holds_each_statement_with_its_values():
    """Django's query log (DEBUG, CaptureQueriesContext) gets each statement with its values,
    as for Django's own cursors, though these travel apart from their statement."""
    op = make_operation(EnquiryFactory(), "approved")
    with CaptureQueriesContext(connection) as queries, transaction.atomic(), roundtrip.together():
        op.attempt_count = 4321
        roundtrip.update(op, ["attempt_count"])
        roundtrip.insert([_attempt(op, 1)])
    [update] = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert "4321" in update and op.pk.hex in update
    [insert] = [q["sql"] for q in queries if q["sql"].startswith("INSERT")]
    assert "ENQ-1" in insert


def test_a_read_in_the_block_sees_every_write_queued_before_it():
    op = make_operation(EnquiryFactory(), "approved")
    with transaction.atomic(), roundtrip.together():
        op.attempt_count = 7
        roundtrip.update(op, ["attempt_count"])
        assert Operation.objects.values_list("attempt_count", flat=True).get(pk=op.pk) == 7
        with connection.cursor() as cursor:  # a raw statement, too
            cursor.execute("SELECT attempt_count FROM ledger_operation WHERE id = %s", [op.pk])
            assert cursor.fetchone() == (7,)


def test_an_update_that_finds_no_row_raises_and_nothing_is_written():
    op = make_operation(EnquiryFactory(), "approved")
    gone = Operation.objects.get(pk=op.pk)
    gone.pk = uuid.uuid4()  # no such row
    with (
        pytest.raises(DatabaseError, match="found no row"),
        transaction.atomic(),
        roundtrip.together(),
    ):
        roundtrip.insert([_attempt(op, 1)])
        gone.attempt_count = 5
        roundtrip.update(gone, ["attempt_count"])
    assert not Attempt.objects.filter(operation=op).exists()
    assert Operation.objects.get(pk=op.pk).attempt_count == 0


def test_an_error_in_a_queued_statement_rolls_the_whole_transaction_back():
    """Raised as Django's own error class (a caller catching IntegrityError still does)."""
    op = make_operation(EnquiryFactory(), "approved")
    with pytest.raises(IntegrityError), transaction.atomic(), roundtrip.together():
        op.attempt_count = 9
        roundtrip.update(op, ["attempt_count"])
        roundtrip.insert([_attempt(op, 1), _attempt(op, 1)])  # the same number twice
    assert Operation.objects.get(pk=op.pk).attempt_count == 0
    assert not Attempt.objects.filter(operation=op).exists()


@pytest.mark.django_db(transaction=True)
def test_a_block_needs_a_transaction():
    with pytest.raises(RuntimeError, match="atomic"), roundtrip.together():
        pass


def test_a_nested_block_joins_the_outer_one():
    op = make_operation(EnquiryFactory(), "approved")
    with wire.sent(connection) as sent, transaction.atomic(), roundtrip.together():
        roundtrip.insert([_attempt(op, 1)])
        with roundtrip.together():
            roundtrip.insert([_attempt(op, 2)])
        assert roundtrip.is_open()
        roundtrip.insert([_attempt(op, 3)])
    assert not roundtrip.is_open()
    assert sent.without("SAVEPOINT", "RELEASE") == [[sent.statements[1]] * 3], sent.exchanges
    assert Attempt.objects.filter(operation=op).count() == 3


def test_outside_a_block_a_write_runs_at_once():
    op = make_operation(EnquiryFactory(), "approved")
    attempt = _attempt(op, 1)
    roundtrip.insert([attempt])
    assert Attempt.objects.filter(pk=attempt.pk).exists()


def test_an_fsm_row_written_out_saves_later_through_the_orm():
    """django-fsm's concurrency check compares the state it last saw: after a written-out
    update (config.roundtrip calls its _update_initial_state, as its save() does) a later
    save() must find the row, and a save of the stale state must not."""
    op = make_operation(EnquiryFactory(), "approved")
    with transaction.atomic():
        op.submit(actor="system:test", reason="attempt 1")
        roundtrip.update(op, ["state", "state_changed_at"])
    with transaction.atomic():
        op.confirm(actor="system:test", reason="done")
        op.save()
    assert Operation.objects.get(pk=op.pk).state == "confirmed"


def test_the_enquirys_message_guard_holds_for_a_written_out_update():
    enquiry = EnquiryFactory()
    enquiry.message = "rewritten"
    with pytest.raises(ValueError, match="never overwritten"), transaction.atomic():
        roundtrip.update(enquiry, ["message"])
    assert Enquiry.objects.get(pk=enquiry.pk).message != "rewritten"


def test_rows_of_two_models_in_one_insert_are_refused():
    enquiry = EnquiryFactory()
    revision = Revision(enquiry=enquiry, number=2, fields={}, origin="intake")
    with pytest.raises(TypeError, match="one model"):
        roundtrip.insert([_entry(enquiry, "test.a"), revision])
