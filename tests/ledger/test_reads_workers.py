"""Reads' share of the workers with a real cluster: one enquiry's eight documents on a document
store that does not answer (WsgiDAV behind the fault proxy, every read held until released)
never take every worker, and an unrelated write goes out while they are held.

Counted, never timed: the most reads the store had in hand at once (the proxy's peak), the reads
in flight in the ledger when the write was confirmed, and what reached the CRM.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from harness.faultproxy import FaultProxy
from harness.webdav import WebDavServer
from harness.webdav.documents import text_pdf
from intake.models import Document
from ledger.models import Integration, Operation, OperationState
from ledger.proposals import propose_extraction
from tests.ledger.conftest import crm_records

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WORKERS = 4
SHARE = WORKERS - 1  # READS_MAX_IN_FLIGHT's default
DOCUMENTS = 8


@pytest.fixture(scope="module")
def dav(tmp_path_factory):
    with WebDavServer(tmp_path_factory.mktemp("share")) as server:
        yield server


@pytest.fixture(scope="module")
def store(dav, tmp_path_factory):
    """The fault proxy in front of the share: the document store the workers read from."""
    log = tmp_path_factory.mktemp("proxy") / "proxy.log"
    with FaultProxy(dav.url, targets={"reads": "GET /*"}, log_path=log) as running:
        yield running


def in_flight_reads() -> int:
    return Operation.objects.filter(
        action="documents.extract", state=OperationState.SUBMITTED
    ).count()


def test_eight_held_reads_of_one_enquiry_leave_a_worker_for_an_unrelated_write(
    dav, store, sandbox, integrations, make_enquiry, approved_enquiry, start_cluster, wait_for
):
    store.reset()
    Integration.objects.filter(name=Integration.DOCUMENTS).update(
        kind="webdav", base_url=store.url, token=dav.token, timeout_seconds=50.0
    )
    store.fault("reads", "late", count=1000)  # every read held until released
    enquiry = make_enquiry()
    reads = []
    for number in range(DOCUMENTS):
        name = f"statement-{number}.pdf"
        version = dav.put(name, text_pdf(f"Statement {number}"))
        document = Document.objects.create(enquiry=enquiry, document_id=name, version=version)
        with transaction.atomic():
            reads.append(propose_extraction(enquiry, document, reason="attached")[0])

    # One enquiry may have all eight in flight here: only the share holds them back.
    cluster = start_cluster(
        workers=WORKERS,
        env={"Q_TIMEOUT": "60", "Q_RETRY": "90", "READS_PER_ENQUIRY": str(DOCUMENTS)},
    )
    wait_for(
        lambda: store.stats()["held"] >= SHARE,
        timeout=90,
        interval=0.2,
        message=f"{SHARE} reads held at the store\n{cluster.log(3000)}",
    )

    other, write = approved_enquiry()  # an unrelated enquiry's CRM write, queued after them
    wait_for(
        lambda: Operation.objects.get(pk=write.pk).state == OperationState.CONFIRMED,
        timeout=90,
        interval=0.2,
        message=f"the write confirmed while the reads are held\n{cluster.log(3000)}",
    )
    # The write went out while every read in flight was still held at the store.
    stats = store.stats()
    assert stats["held"] == SHARE and in_flight_reads() == SHARE, stats
    assert not Operation.objects.filter(
        pk__in=[r.pk for r in reads], state=OperationState.CONFIRMED
    ).exists()
    assert crm_records(sandbox, other.reference) == 1

    store.clear_faults()
    store.release()
    wait_for(
        lambda: (
            Operation.objects.filter(
                pk__in=[r.pk for r in reads], state=OperationState.CONFIRMED
            ).count()
            == DOCUMENTS
        ),
        timeout=120,
        interval=0.5,
        message=f"every document read\n{cluster.log(3000)}",
    )
    stats = store.stats()
    print(f"reads in hand at the store at most: {stats['peak_in_flight']} (share {SHARE})")
    assert stats["peak_in_flight"] == SHARE  # used whole, never exceeded
    assert stats["targets"]["reads"]["forwarded"] == DOCUMENTS  # each read once, no retry
    for read in Operation.objects.filter(pk__in=[r.pk for r in reads]):
        assert read.attempt_count == 1 and read.budget_used == 1
    assert set(Document.objects.filter(enquiry=enquiry).values_list("status", flat=True)) == {
        "extracted"
    }
