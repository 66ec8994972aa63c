"""Two reconciliations of one operation at once, against the real sandbox.

A lookup holds no lock and commits nothing before it asks the destination; what it found is
recorded in one transaction, and only if the operation has not moved on since it was read.
One reconciliation is held inside its lookup (the sandbox's latency fault) while the other
runs to the end; the first must then change nothing but record its lookup.
"""

import threading

import pytest
import requests
from django.db import connections

from ledger import execution
from ledger.execution import Lookup
from ledger.models import JournalEntry, OperationState
from tests.ledger.conftest import crm_records
from tests.ledger.factories import make_operation

pytestmark = pytest.mark.django_db(transaction=True)

HELD_MS = 1500


class Reconciling(threading.Thread):
    def __init__(self, op_id):
        super().__init__(daemon=True)
        self.op_id = op_id
        self.outcome = None
        self.error = None

    def run(self):
        try:
            self.outcome = execution.reconcile(self.op_id)
        except Exception as exc:  # reported by the test
            self.error = exc
        finally:
            connections.close_all()

    def result(self):
        self.join(30)
        assert not self.is_alive(), "the held reconciliation did not finish"
        if self.error is not None:
            raise self.error
        return self.outcome


@pytest.fixture
def unknown_write(make_enquiry, integrations):
    enquiry = make_enquiry()
    op = make_operation(enquiry, "unknown", integration=integrations["crm"])
    return enquiry, op


def _lookups(sandbox):
    return sandbox.stats()["requests"].get("crm.lookup", 0)


def _overtaken(sandbox, op, wait_for):
    """Start a reconciliation held in its lookup; return it once the sandbox has the call."""
    sandbox.fault("crm.lookup", "latency", delay_ms=HELD_MS)
    held = Reconciling(op.pk)
    held.start()
    wait_for(lambda: _lookups(sandbox) >= 1, message="the held lookup to reach the sandbox")
    return held


def test_a_lookup_overtaken_by_a_confirmation_changes_nothing(unknown_write, sandbox, wait_for):
    enquiry, op = unknown_write
    # The write had committed at the destination; its answer was lost.
    requests.post(
        f"{sandbox.url}/crm/enquiries", json={"reference": enquiry.reference}, timeout=5
    ).raise_for_status()
    held = _overtaken(sandbox, op, wait_for)

    assert execution.reconcile(op.pk) is Lookup.CONFIRMED
    assert held.result() is Lookup.SUPERSEDED

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    assert list(op.attempts.order_by("number").values_list("kind", "outcome")) == [
        ("lookup", "found"),
        ("lookup", "superseded"),
    ]
    assert op.attempt_count == 2
    confirmations = JournalEntry.objects.filter(
        subject_id=str(op.pk), to_state=OperationState.CONFIRMED
    )
    assert confirmations.count() == 1
    assert crm_records(sandbox, enquiry.reference) == 1
    assert _lookups(sandbox) == 2
    assert sandbox.stats()["requests"].get("crm.create", 0) == 1  # only the setup's


def test_a_lookup_overtaken_while_the_operation_stays_unknown_changes_nothing(
    unknown_write, sandbox, wait_for, integrations
):
    """The other lookup found nothing yet and scheduled the next one (the settle delay): the
    operation is still `unknown`, but an attempt was recorded since the held lookup read it,
    so the held one must not schedule a second."""
    from django_q.models import OrmQ

    integrations["crm"].settle_delay_seconds = 600
    integrations["crm"].save()
    enquiry, op = unknown_write
    OrmQ.objects.all().delete()
    held = _overtaken(sandbox, op, wait_for)

    assert execution.reconcile(op.pk) is Lookup.SETTLING
    assert held.result() is Lookup.SUPERSEDED

    op.refresh_from_db()
    assert op.state == OperationState.UNKNOWN
    assert list(op.attempts.order_by("number").values_list("outcome", flat=True)) == [
        "not_found_unsettled",
        "superseded",
    ]
    assert OrmQ.objects.count() == 1  # the one scheduled lookup, not two
    assert crm_records(sandbox, enquiry.reference) == 0
    assert sandbox.stats()["requests"].get("crm.create", 0) == 0
