import psycopg
import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django_fsm import TransitionNotAllowed

from intake.models import Enquiry, EnquiryState
from ledger.models import JournalEntry


@pytest.fixture
def enquiry(db):
    return Enquiry.objects.create(source="website", message="My page is slow")


def test_transition_writes_one_journal_row_in_its_transaction(enquiry):
    with transaction.atomic():
        enquiry.validate(actor="system:test", reason="fields valid", evidence={"k": 1})
        enquiry.save()
    rows = list(JournalEntry.objects.filter(subject_id=str(enquiry.pk)))
    assert len(rows) == 1
    row = rows[0]
    assert (row.from_state, row.to_state) == ("received", "validated")
    assert row.action == "intake.enquiry.validate"
    assert row.actor == "system:test"
    assert row.reason == "fields valid"
    assert row.evidence == {"k": 1}
    assert row.enquiry_id == enquiry.pk


@pytest.mark.django_db(transaction=True)
def test_transition_outside_a_transaction_is_refused():
    enquiry = Enquiry.objects.create(source="website", message="My page is slow")
    with pytest.raises(RuntimeError, match="inside transaction"):
        enquiry.validate(actor="system:test")
    assert JournalEntry.objects.count() == 0


def test_rolled_back_transition_leaves_no_journal_row(enquiry):
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        enquiry.validate(actor="system:test")
        enquiry.save()
        1 / 0  # noqa: B018
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.RECEIVED
    assert JournalEntry.objects.count() == 0


def test_state_field_is_protected(enquiry):
    with pytest.raises(AttributeError):
        enquiry.state = EnquiryState.CONFIRMED


def test_illegal_transition_is_refused(enquiry):
    with pytest.raises(TransitionNotAllowed), transaction.atomic():
        enquiry.confirm(actor="system:test")


def test_a_person_cannot_fire_a_system_transition(enquiry, make_user):
    admin = make_user("admin")
    with pytest.raises(PermissionDenied), transaction.atomic():
        enquiry.validate(actor=admin)
    assert enquiry.state == EnquiryState.RECEIVED


def test_a_model_cannot_approve(enquiry):
    with transaction.atomic():
        enquiry.validate(actor="system:test")
        enquiry.mark_ready_for_review(actor="model:keywords@1")
        enquiry.save()
    with pytest.raises(PermissionDenied), transaction.atomic():
        enquiry.approve(actor="model:gpt@1")


def test_orm_refuses_update_and_delete(enquiry):
    with transaction.atomic():
        enquiry.validate(actor="system:test")
        enquiry.save()
    row = JournalEntry.objects.get()
    row.reason = "rewritten"
    with pytest.raises(PermissionError):
        row.save()
    with pytest.raises(PermissionError):
        row.delete()
    with pytest.raises(PermissionError):
        JournalEntry.objects.all().update(reason="x")
    with pytest.raises(PermissionError):
        JournalEntry.objects.all().delete()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE ledger_journalentry SET reason = 'rewritten'",
        "DELETE FROM ledger_journalentry",
        "TRUNCATE ledger_journalentry CASCADE",
    ],
)
def test_database_trigger_refuses_update_delete_truncate(statement):
    enquiry = Enquiry.objects.create(source="website", message="hello")
    with transaction.atomic():
        enquiry.validate(actor="system:test")
        enquiry.save()
    # A plain connection, as an intruder or a careless script would have: no test settings.
    params = connection.get_connection_params()
    params.pop("options", None)
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as raw:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            raw.execute(statement)
        assert raw.execute("SELECT count(*) FROM ledger_journalentry").fetchone()[0] == 1


def test_deferred_rows_are_inserted_together_at_the_end_in_order(enquiry):
    from ledger import journal

    with transaction.atomic(), journal.deferred():
        first = journal.record(enquiry, "test.first", actor="system:test")
        with journal.deferred():  # nested: the outer block writes
            second = journal.record(enquiry, "test.second", actor="system:test")
        assert JournalEntry.objects.filter(subject_id=str(enquiry.pk)).count() == 0
        assert first.pk is None and second.pk is None
    rows = list(JournalEntry.objects.filter(subject_id=str(enquiry.pk)))
    assert [r.action for r in rows] == ["test.first", "test.second"]
    assert rows[0].at <= rows[1].at and rows[0].pk < rows[1].pk


def test_deferred_rows_are_discarded_with_an_exception(enquiry):
    from ledger import journal

    with pytest.raises(ZeroDivisionError), transaction.atomic(), journal.deferred():
        journal.record(enquiry, "test.first", actor="system:test")
        1 / 0  # noqa: B018
    assert JournalEntry.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_deferred_outside_a_transaction_is_refused():
    from ledger import journal

    with pytest.raises(RuntimeError, match="inside transaction"), journal.deferred():
        pass
