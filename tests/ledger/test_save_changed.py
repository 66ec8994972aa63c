"""The engine writes only the columns a step changed (``ledger.execution.locking.save_changed``)
and never leaves one out.

A django-fsm transition sets more than the state (its timestamp; ``closed_at`` for an enquiry
confirmed, ``attention`` for an operation confirmed), and the engine sets the rest. Each path of
the engine is run here one step at a time (one transaction), and every operation and enquiry it
saved is read back: each field of the instance, as the step left it, must be what the row holds.
"""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from intake.models import Enquiry, EnquiryState
from ledger import effects
from ledger.connectors.base import CallResult, ConnectorError, ErrorKind, LookupResult
from ledger.execution import executing, locking, outcomes, reconciling
from ledger.models import Operation, OperationState
from ledger.worker import worker_actor
from tests import wire

MODULES = (executing, outcomes, reconciling, effects)


@pytest.fixture
def saved(monkeypatch):
    """The instances save_changed() wrote, in order."""
    seen = []
    real = locking.save_changed

    def spy(instance):
        real(instance)
        seen.append(instance)

    for module in MODULES:
        monkeypatch.setattr(module, "save_changed", spy)
    return seen


def assert_as_stored(instances, *, kinds=(Operation, Enquiry)):
    """Every field of each instance equals its row's (the step wrote everything it changed)."""
    assert {type(i) for i in instances} >= set(kinds), instances
    for instance in {id(i): i for i in instances}.values():
        stored = type(instance).objects.get(pk=instance.pk)
        for field in instance._meta.concrete_fields:
            if getattr(field, "generated", False):
                continue
            mine, theirs = getattr(instance, field.attname), getattr(stored, field.attname)
            assert mine == theirs, f"{type(instance).__name__}.{field.name}: {mine!r} != {theirs!r}"


def claimed(approved_enquiry, saved):
    enquiry, op = approved_enquiry()
    result = executing.claim(op.pk)
    assert result is not None
    _op, attempt, _shortcut = result
    assert_as_stored(saved)
    saved.clear()
    return enquiry, op, attempt


def test_the_claim_writes_the_state_and_what_it_changed(approved_enquiry, saved):
    enquiry, op, _attempt = claimed(approved_enquiry, saved)
    op.refresh_from_db()
    enquiry.refresh_from_db()
    assert (op.state, enquiry.state) == (OperationState.SUBMITTED, EnquiryState.SUBMITTED)
    assert op.lease_owner and op.lease_expires_at and op.attempt_count == 1


@pytest.mark.parametrize(
    "error, state",
    [
        (ConnectorError(ErrorKind.TRANSIENT, "503", status=503), OperationState.APPROVED),
        (
            ConnectorError(ErrorKind.TRANSIENT, "429", status=429, retry_after=30),
            OperationState.APPROVED,
        ),
        (ConnectorError(ErrorKind.UNCERTAIN, "timed out"), OperationState.UNKNOWN),
        (
            ConnectorError(
                ErrorKind.UNCERTAIN, "odd", status=200, attention="no_reference", evidence={"x": 1}
            ),
            OperationState.UNKNOWN,
        ),
        (ConnectorError(ErrorKind.INVALID, "422", status=422, body="bad"), OperationState.FAILED),
        (ConnectorError(ErrorKind.AUTH, "401", status=401), OperationState.FAILED),
        (ConnectorError(ErrorKind.INTERNAL, "bug"), OperationState.FAILED),
    ],
    ids=["transient", "throttled", "uncertain", "uncertain-attention", "invalid", "auth", "bug"],
)
def test_each_failure_writes_everything_it_changed(approved_enquiry, saved, error, state):
    _enquiry, op, attempt = claimed(approved_enquiry, saved)
    executing.record_failure(op.pk, attempt, error, actor=worker_actor())
    assert_as_stored(saved, kinds=(Operation,))
    op.refresh_from_db()
    assert op.state == state


def test_success_writes_the_confirmation_and_the_enquiry_closed(approved_enquiry, saved):
    enquiry, op, attempt = claimed(approved_enquiry, saved)
    result = CallResult(201, "crm_1", "{}", {"made": True})
    assert executing.record_success(op.pk, attempt, result, actor=worker_actor()) == "confirmed"
    assert_as_stored(saved)
    op.refresh_from_db()
    enquiry.refresh_from_db()
    assert (op.state, op.external_id, op.result) == (
        OperationState.CONFIRMED,
        "crm_1",
        {"made": True},
    )
    assert enquiry.state == EnquiryState.CONFIRMED and enquiry.closed_at is not None


def unknown(approved_enquiry, saved):
    enquiry, op, attempt = claimed(approved_enquiry, saved)
    executing.record_failure(
        op.pk, attempt, ConnectorError(ErrorKind.UNCERTAIN, "timed out"), actor=worker_actor()
    )
    saved.clear()
    op.refresh_from_db()
    return enquiry, op


def look(op, found, error=None):
    return reconciling.record_lookup(
        op.pk,
        found,
        error,
        actor=worker_actor(),
        started=timezone.now(),
        seen_attempts=op.attempt_count,
    )


@pytest.mark.parametrize(
    "found, error, state, kinds",
    [
        (LookupResult(found=[{"id": "crm_9"}], status=200), None, OperationState.CONFIRMED, None),
        (LookupResult(found=[], status=200), None, None, (Operation,)),
        (
            LookupResult(found=[{"id": "a"}, {"id": "b"}]),
            None,
            OperationState.UNKNOWN,
            (Operation,),
        ),
        (LookupResult(found=[{"id": "a"}], failed="bounced"), None, OperationState.FAILED, None),
        (
            None,
            ConnectorError(ErrorKind.TRANSIENT, "503", status=503),
            OperationState.UNKNOWN,
            (Operation,),
        ),
        (
            None,
            ConnectorError(ErrorKind.TRANSIENT, "429", retry_after=5),
            OperationState.UNKNOWN,
            (Operation,),
        ),
    ],
    ids=["found", "not-found", "duplicates", "found-failed", "lookup-failed", "throttled"],
)
def test_each_lookup_writes_everything_it_changed(
    approved_enquiry, saved, found, error, state, kinds
):
    _enquiry, op = unknown(approved_enquiry, saved)
    look(op, found, error)
    assert_as_stored(saved, kinds=kinds or (Operation, Enquiry))
    op.refresh_from_db()
    assert state is None or op.state == state


def test_an_enquiry_transition_does_not_rewrite_the_whole_row(approved_enquiry):
    """The claim's and the confirmation's UPDATEs of the enquiry set its state, timestamps and
    what the transition changed: not its text, so PostgreSQL does not recompute its stored
    search vector (intake.models.Enquiry.search_vector) on each step.

    An enquiry with no address: with one, the confirmation also proposes the resident's
    "passed on" message (ledger.receivers.tell_resident), its own operation and statements."""
    _enquiry, op = approved_enquiry(email="")
    with wire.sent(connection) as claim:
        _op, attempt, _shortcut = executing.claim(op.pk)
    with wire.sent(connection) as confirm:
        executing.record_success(op.pk, attempt, CallResult(201, "c", "", {}), actor="system:t")
    for sent in (claim, confirm):
        [update] = [s for s in sent.statements if s.startswith('UPDATE "intake_enquiry"')]
        assert '"state"' in update
        assert '"message"' not in update and '"name"' not in update and '"email"' not in update
        [update] = [s for s in sent.statements if s.startswith('UPDATE "ledger_operation"')]
        assert '"state"' in update and '"payload"' not in update
        # Each step's writes (the attempt, the operation, the enquiry, the journal) went to
        # PostgreSQL in one round trip after the lock (config.roundtrip).
        exchanges = sent.without("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT")
        [lock] = [i for i, ex in enumerate(exchanges) if ex[0].startswith("WITH enquiry AS")]
        writes = [ex for ex in exchanges if ex[0].startswith(("INSERT", "UPDATE"))]
        assert len(writes) == 1 and exchanges.index(writes[0]) == lock + 1, exchanges
        tables = " ".join(writes[0])
        assert "ledger_journalentry" in tables and "ledger_attempt" in tables


def test_save_changed_writes_a_json_value_changed_in_place_and_nothing_when_nothing_changed(
    approved_enquiry,
):
    _enquiry, op = approved_enquiry()
    with transaction.atomic():
        _e, locked = locking.lock_operation(op.pk)
        locked.result["kept"] = "yes"  # in place: the row's copy must still differ
        locking.save_changed(locked)
        with CaptureQueriesContext(connection) as again:
            locking.save_changed(locked)
    assert len(again) == 0
    op.refresh_from_db()
    assert op.result == {"kept": "yes"}


def test_an_instance_read_elsewhere_is_saved_whole(approved_enquiry):
    enquiry, _op = approved_enquiry()
    enquiry.receipt_error = "x"
    with CaptureQueriesContext(connection) as queries:
        locking.save_changed(enquiry)
    [update] = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert '"message"' in update
    enquiry.refresh_from_db()
    assert enquiry.receipt_error == "x"


def test_an_instance_saved_plainly_in_between_still_saves_its_changes(approved_enquiry):
    """A plain save() of a locked instance (an operator action's service does so after
    schedule_reconcile) leaves the snapshot behind; a later save_changed must still write,
    not refuse the row as moved."""
    _enquiry, op = approved_enquiry()
    with transaction.atomic():
        _e, locked = locking.lock_operation(op.pk)
        locked.submit(actor="system:t", reason="attempt 1")
        locked.save()
        locked.confirm(actor="system:t", reason="done")
        locking.save_changed(locked)
    assert Operation.objects.get(pk=op.pk).state == OperationState.CONFIRMED


def test_an_unlocked_read_is_saved_whole_with_the_state_check(approved_enquiry):
    """read_operation's instance is not locked: save_changed saves it as save() does, so
    django-fsm's state check still guards it."""
    from django_fsm import ConcurrentTransition

    _enquiry, op = approved_enquiry()
    unlocked = locking.read_operation(op.pk)
    Operation.objects.filter(pk=op.pk).update(state=OperationState.CANCELLED)
    unlocked.submit(actor="system:t", reason="attempt 1")
    with pytest.raises(ConcurrentTransition), transaction.atomic():
        locking.save_changed(unlocked)
    assert Operation.objects.get(pk=op.pk).state == OperationState.CANCELLED
