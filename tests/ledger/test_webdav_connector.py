"""ledger.connectors.webdav with ``ledger.http.send`` patched (the one allowed patch point): what
is asked (the path, If-Match, the credentials) and what each answer becomes. Non-2xx answers go
through the real ``http.status_error``. The same behaviour against a real WsgiDAV server:
tests/ledger/test_webdav.py."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pytest

from harness.webdav.documents import form_pdf, text_heavy_pdf, text_pdf
from intake.models import Document
from ledger import http
from ledger.connectors.base import ConnectorError, ErrorKind
from ledger.models import Integration, Operation, OperationState
from ledger.proposals import propose_extraction

BASE = "https://dav.example.org/remote.php/dav/files/handover/enquiries"
FORM = form_pdf({"permit": "P-17", "tenant": "Zoë O'Brien", "empty": ""})


@dataclass
class Share:
    """Answers in order: (status, headers, content) or an exception."""

    answers: list = field(default_factory=list)
    calls: list = field(default_factory=list)

    def then(self, status, headers=None, content=b""):
        self.answers.append(status if isinstance(status, Exception) else (status, headers, content))
        return self

    def send(
        self, method, url, *, timeout, json_body=None, params=None, headers=None, max_bytes=None
    ):
        assert timeout and timeout > 0
        self.calls.append((method, url, dict(headers or {})))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, headers, content = answer
        result = http.HttpResult(status, None, "", dict(headers or {}), content)
        if 200 <= status < 300:
            return result
        raise http.status_error(result)


@pytest.fixture
def share(monkeypatch):
    scripted = Share()
    monkeypatch.setattr(http, "send", scripted.send)
    return scripted


@pytest.fixture
def webdav_row(db):
    from ledger.integrations import ensure_integrations

    ensure_integrations()
    Integration.objects.filter(name="documents").update(
        kind="webdav",
        base_url=BASE,
        token="handover:s3cret",
        timeout_seconds=1.0,
        retry_budget=2,
        backoff_seconds=0.0,
        paused=False,
    )
    return Integration.objects.get(name="documents")


@pytest.fixture
def read(make_enquiry, webdav_row, run_queue, child_process):
    """read(document_id, version) -> (operation, document) once the read has an outcome (a
    PDF's text is read in ledger.budget's child process)."""

    def run(document_id="permit-17.pdf", version="1001-1700000000-952"):
        enquiry = make_enquiry()
        document = Document.objects.create(
            enquiry=enquiry, document_id=document_id, version=version
        )
        op, _ = propose_extraction(enquiry, document, reason="test")
        final = (OperationState.CONFIRMED, OperationState.FAILED)
        # Every read it led to, too (a changed document's new version).
        run_queue(until=lambda: not Operation.objects.exclude(state__in=final).exists())
        op.refresh_from_db()
        document.refresh_from_db()
        return op, document

    return run


def etag(version):
    return {"ETag": f'"{version}"', "Content-Type": "application/pdf"}


def test_the_read_asks_for_the_attached_version_by_path_with_the_shares_credentials(share, read):
    share.then(200, etag("1001-1700000000-952"), FORM)
    op, document = read()
    ((method, url, headers),) = share.calls
    assert (method, url) == ("GET", f"{BASE}/permit-17.pdf")
    assert headers["If-Match"] == '"1001-1700000000-952"'
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"handover:s3cret").decode()
    assert op.state == OperationState.CONFIRMED
    assert document.status == "extracted"
    assert document.extracted == {"permit": "P-17", "tenant": "Zoë O'Brien", "empty": ""}
    # The operation keeps what was read, never the document's content.
    assert op.result == {"version": "1001-1700000000-952", "kind": "form", "fields": 3}
    assert "P-17" not in op.attempts.get().response_body


def test_a_document_id_is_one_encoded_segment_of_the_path(share, read):
    share.then(200, etag("7"), FORM)
    read(document_id="a:b..c", version="7")
    assert share.calls[0][1] == f"{BASE}/a%3Ab..c"


def test_a_sharepoint_etag_is_asked_for_and_recognised_as_the_version(share, read):
    """SharePoint names a file's version "{GUID},N": If-Match carries it quoted, and the
    answer's ETag is that version."""
    version = "{8E5A1D3C-4F2B-4C1A-9D3E-2B7C6A5F4E31},12"
    share.then(200, etag(version), FORM)
    op, document = read(version=version)
    ((_method, _url, headers),) = share.calls
    assert headers["If-Match"] == f'"{version}"'
    assert (op.state, document.status) == (OperationState.CONFIRMED, "extracted")
    assert op.result["version"] == version


def test_a_changed_document_is_a_new_version_never_the_old_one(share, read):
    share.then(412, {"Content-Type": "text/html"}, b"<html>precondition failed</html>")
    share.then(200, etag("1001-1700000099-990"), b"")  # HEAD: the version there now
    share.then(200, etag("1001-1700000099-990"), form_pdf({"permit": "P-18"}))
    op, document = read()
    assert [c[0] for c in share.calls] == ["GET", "HEAD", "GET"]
    assert "If-Match" not in share.calls[1][2]
    assert op.state == OperationState.FAILED and op.attention == "document_changed"
    assert op.result["current_version"] == "1001-1700000099-990"
    assert (document.status, document.extracted) == ("changed", {})
    assert "1001-1700000099-990" in document.error
    # The version there now is attached beside it and read as itself.
    new = Document.objects.get(enquiry=document.enquiry, version="1001-1700000099-990")
    assert share.calls[2][2]["If-Match"] == '"1001-1700000099-990"'
    assert (new.status, new.extracted) == ("extracted", {"permit": "P-18"})


def test_an_answer_naming_another_version_is_a_changed_document(share, read):
    share.then(200, etag("other"), FORM)  # a server that ignored If-Match
    share.then(200, etag("other"), FORM)
    op, document = read()
    assert op.attention == "document_changed"
    assert document.extracted == {}
    assert Document.objects.get(enquiry=document.enquiry, version="other").extracted


def test_an_answer_without_a_strong_etag_proves_no_version(share, read):
    share.then(200, {"ETag": 'W/"1001"', "Content-Type": "application/pdf"}, FORM)
    op, document = read()
    assert (op.state, op.attention) == (OperationState.FAILED, "invalid")
    assert (document.status, document.extracted) == ("failed", {})
    assert "ETag" in document.error


@pytest.mark.parametrize("status", [401, 403])
def test_access_removed_is_an_access_failure_and_nothing_is_extracted(share, read, status):
    share.then(status, {"Content-Type": "text/plain"}, b"Not authorized")
    op, document = read()
    assert len(share.calls) == 1  # not retried
    assert (op.state, op.attention) == (OperationState.FAILED, "access_denied")
    assert (document.status, document.extracted) == ("access_denied", {})


def test_a_timeout_is_asked_again_within_the_budget_then_a_visible_failure(share, read):
    no_answer = ConnectorError(ErrorKind.UNCERTAIN, "no answer within 1.0s")
    share.then(no_answer).then(no_answer)
    op, document = read()
    assert len(share.calls) == 2  # the row's retry budget
    assert (op.state, op.attention) == (OperationState.FAILED, "retry_budget_exhausted")
    assert op.attempts.count() == 2
    assert (document.status, document.extracted) == ("failed", {})


def test_a_timeout_then_an_answer_extracts(share, read):
    share.then(ConnectorError(ErrorKind.UNCERTAIN, "no answer within 1.0s"))
    share.then(200, etag("1001-1700000000-952"), FORM)
    op, document = read()
    assert op.state == OperationState.CONFIRMED and document.extracted["permit"] == "P-17"


def test_a_document_that_is_not_a_form_gives_its_text_for_the_reviewer(share, read):
    share.then(200, etag("5"), text_pdf("Tenancy agreement for 14 Larkspur Row"))
    _op, document = read(version="5")
    assert document.extracted == {}
    assert document.text == "Tenancy agreement for 14 Larkspur Row"


def test_a_broken_pdf_is_refused_with_what_was_wrong(share, read):
    share.then(200, etag("5"), b"%PDF-1.7 truncated")
    op, document = read(version="5")
    assert (op.state, op.attention, document.status) == (OperationState.FAILED, "invalid", "failed")
    assert "not a readable PDF" in document.error


def test_a_document_too_large_to_read_is_invalid_once_and_the_reviewer_is_told_why(share, read):
    """11 KB that decode to 4 MB of text operators: refused by its count, not retried as if the
    store might recover (one GET), and the document says why on the review page's card."""
    share.then(200, etag("5"), text_heavy_pdf(4 * 2**20))
    op, document = read(version="5")
    assert [c[0] for c in share.calls] == ["GET"]
    assert (op.state, op.attention, op.last_error_class) == (
        OperationState.FAILED,
        "invalid",
        "invalid",
    )
    assert op.attempt_count == 1
    assert (document.status, document.extracted, document.text) == ("failed", {}, "")
    assert "too large to read: page 1's content is 4,194,295 bytes decoded" in document.error


def test_a_bearer_token_without_a_colon(share, webdav_row):
    from ledger.connectors.webdav import WebDavDocumentRead

    webdav_row.token = "eyJ0eXAi"
    assert WebDavDocumentRead(webdav_row).headers()["Authorization"] == "Bearer eyJ0eXAi"
    webdav_row.token = ""
    assert "Authorization" not in WebDavDocumentRead(webdav_row).headers()
