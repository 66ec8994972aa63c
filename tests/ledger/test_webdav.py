"""The document integration against a real WebDAV server (WsgiDAV, harness.webdav) through the
fault proxy: each outcome proved in the database and at the server (what it holds, how many
reads reached it)."""

from __future__ import annotations

import pytest

from harness.faultproxy import FaultProxy
from harness.webdav import WebDavServer
from harness.webdav.documents import form_pdf
from intake.documents import correct_document_field
from intake.models import Document
from ledger import extraction
from ledger.models import Integration, Operation, OperationState
from ledger.proposals import propose_extraction
from ledger.services import reprocess_document

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

READS = "GET /*"


@pytest.fixture(scope="module")
def dav(tmp_path_factory):
    with WebDavServer(tmp_path_factory.mktemp("share")) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(dav, tmp_path_factory):
    log = tmp_path_factory.mktemp("proxy") / "proxy.log"
    with FaultProxy(dav.url, targets={"reads": READS}, log_path=log) as running:
        yield running


@pytest.fixture
def share(db, dav, proxy):
    """The documents integration on the share, through the proxy; no faults, counters reset."""
    from ledger.integrations import ensure_integrations

    if dav.password != "dav-secret":
        dav.change_credentials("dav-secret")
    proxy.reset()
    ensure_integrations()
    Integration.objects.filter(name="documents").update(
        kind="webdav",
        base_url=proxy.url,
        token=dav.token,
        timeout_seconds=1.0,
        retry_budget=3,
        backoff_seconds=0.0,
        paused=False,
    )
    return dav


def reads():
    return Operation.objects.filter(action="documents.extract").exclude(
        state__in=(OperationState.CONFIRMED, OperationState.FAILED, OperationState.CANCELLED)
    )


@pytest.fixture
def attach(make_enquiry, share, run_queue):
    """attach(name, version) -> the Document, once every read it led to has an outcome."""

    def run(name, version, enquiry=None):
        enquiry = enquiry or make_enquiry()
        document, _ = Document.objects.get_or_create(
            enquiry=enquiry, document_id=name, version=version
        )
        propose_extraction(enquiry, document, reason="attached")
        run_queue(until=lambda: not reads().exists(), timeout=30)
        document.refresh_from_db()
        return document

    return run


def held(share, name) -> dict:
    """The fields of the document as the server holds it (read from its folder)."""
    return extraction.extract(share.read(name)).fields


def forwarded(proxy):
    return proxy.stats()["targets"]["reads"]["forwarded"]


def test_a_pdf_forms_fields_are_read_from_the_version_attached(share, proxy, attach):
    version = share.put("permit-1.pdf", form_pdf({"permit": "P-1", "ward": "North"}))
    document = attach("permit-1.pdf", version)
    assert (document.status, document.extracted) == (
        "extracted",
        {"permit": "P-1", "ward": "North"},
    )
    assert forwarded(proxy) == 1


def test_the_document_changed_between_reads_is_read_as_a_new_version(share, proxy, attach):
    attached = share.put("permit-2.pdf", form_pdf({"permit": "P-2"}))
    share.put("permit-2.pdf", form_pdf({"permit": "P-2-AMENDED", "note": "changed"}))
    now = share.etag("permit-2.pdf")
    assert now != attached
    document = attach("permit-2.pdf", attached)
    op = Operation.objects.get(payload__version=attached)
    assert (op.state, op.attention) == (OperationState.FAILED, "document_changed")
    assert (document.status, document.extracted) == ("changed", {})
    new = Document.objects.get(enquiry=document.enquiry, version=now)
    assert new.extracted == {"permit": "P-2-AMENDED", "note": "changed"}
    # The old version's read, then the new one's (the HEAD in between is not a GET).
    assert forwarded(proxy) == 2
    assert held(share, "permit-2.pdf") == {"permit": "P-2-AMENDED", "note": "changed"}


def test_access_removed_is_an_access_failure_with_nothing_invented(share, proxy, attach):
    version = share.put("permit-3.pdf", form_pdf({"permit": "P-3"}))
    share.change_credentials("rotated-by-the-owner")
    document = attach("permit-3.pdf", version)
    op = Operation.objects.get(payload__document_id="permit-3.pdf")
    assert (op.state, op.attention, op.last_error_status) == (
        OperationState.FAILED,
        "access_denied",
        401,
    )
    assert (document.status, document.extracted, document.text) == ("access_denied", {}, "")
    assert forwarded(proxy) == 1  # refused once, never asked again
    assert held(share, "permit-3.pdf") == {"permit": "P-3"}  # still there: only the access went


def test_a_timeout_is_asked_again_and_then_read(share, proxy, attach):
    version = share.put("permit-4.pdf", form_pdf({"permit": "P-4"}))
    proxy.fault("reads", "hold", count=1, delay_ms=3000)  # longer than the 1 s timeout
    document = attach("permit-4.pdf", version)
    op = Operation.objects.get(payload__document_id="permit-4.pdf")
    assert op.state == OperationState.CONFIRMED
    assert [a.error_class for a in op.attempts.order_by("number")] == ["transient", ""]
    assert document.extracted == {"permit": "P-4"}


def test_a_timeout_on_every_attempt_is_a_visible_failure_after_the_budget(share, proxy, attach):
    version = share.put("permit-5.pdf", form_pdf({"permit": "P-5"}))
    proxy.fault("reads", "hold", count=3, delay_ms=3000)
    document = attach("permit-5.pdf", version)
    op = Operation.objects.get(payload__document_id="permit-5.pdf")
    assert (op.state, op.attention, op.attempts.count()) == (
        OperationState.FAILED,
        "retry_budget_exhausted",
        3,
    )
    assert (document.status, document.extracted) == ("failed", {})


def test_a_correction_is_kept_across_reprocessing_the_same_version(
    share, proxy, attach, reviewer, run_queue
):
    version = share.put("permit-6.pdf", form_pdf({"permit": "P-6", "ward": "Nrth"}))
    document = attach("permit-6.pdf", version)
    correct_document_field(
        document.pk, actor=reviewer, reason="the form says North", field="ward", value="North"
    )
    op = reprocess_document(document.pk, actor=reviewer, reason="extractor updated")
    run_queue(until=lambda: not reads().exists(), timeout=30)
    op.refresh_from_db()
    document.refresh_from_db()
    assert op.state == OperationState.CONFIRMED and op.revision == 2
    assert forwarded(proxy) == 2  # it was read again, at the server
    assert document.extracted == {"permit": "P-6", "ward": "Nrth"}  # the same result
    assert document.corrected == {"ward": "North"}  # never overwritten
    assert document.fields == {"permit": "P-6", "ward": "North"}
    # What the CRM is sent for the corrected revision carries the correction.
    write = Operation.objects.get(action="crm.create_enquiry", revision=2)
    assert write.payload["documents"] == [
        {"id": "permit-6.pdf", "version": version, "fields": {"permit": "P-6", "ward": "North"}}
    ]
    assert held(share, "permit-6.pdf") == {"permit": "P-6", "ward": "Nrth"}  # untouched there


def test_check_connection_says_ready_then_names_refused_credentials(share):
    from ledger.models import kind_of

    row = Integration.objects.get(name="documents")
    assert kind_of(row).check(row) == []
    share.change_credentials("rotated-again")
    (problem,) = kind_of(row).check(row)
    assert "refused Handover's credentials" in problem
    assert share.password not in problem and "dav-secret" not in problem
