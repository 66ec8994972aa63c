"""A document id (or any identifier) cannot steer a connector's request to another path of the
destination: every connector builds its paths with ledger.http.path (issue 18, item 8).

Intake now refuses such ids; these rows are stored directly, as rows stored before that rule
(or from any other source) would be. The sandbox counts every request by the path it received.
"""

import pytest
from django.db import transaction

from intake.models import Document
from ledger import http, services
from ledger.connectors.base import ConnectorError, ErrorKind
from ledger.connectors.crm import CrmCloseConnector
from ledger.connectors.notify import NotifyConnector
from ledger.models import Operation, OperationState

pytestmark = pytest.mark.django_db

HOSTILE = {
    "../crm/enquiries": "/docs/..%2Fcrm%2Fenquiries",
    "x?version=9&a=b#frag": "/docs/x%3Fversion%3D9%26a%3Db%23frag",
    "..%2F..%2Fcrm%2Fenquiries": "/docs/..%252F..%252Fcrm%252Fenquiries",
}


@pytest.mark.parametrize(
    ("segments", "expected"),
    [
        (("docs", "doc-17"), "/docs/doc-17"),
        (("docs", "a/b"), "/docs/a%2Fb"),
        (("docs", "x?y=1#z"), "/docs/x%3Fy%3D1%23z"),
        (("docs", "100%"), "/docs/100%25"),
        (("docs", "..."), "/docs/..."),
        (("docs", "caf\u00e9 1"), "/docs/caf%C3%A9%201"),
        (("crm", "enquiries", 42, "close"), "/crm/enquiries/42/close"),
        *((("docs", hostile), path) for hostile, path in HOSTILE.items()),
    ],
)
def test_path_encodes_each_segment_whole(segments, expected):
    assert http.path(*segments) == expected


@pytest.mark.parametrize("segment", ["", ".", "..", "\ud800"])
def test_path_refuses_what_cannot_be_a_segment(segment):
    with pytest.raises(ConnectorError) as caught:
        http.path("docs", segment)
    assert caught.value.kind is ErrorKind.INVALID
    assert "request not sent" in caught.value.message


def test_a_document_id_cannot_steer_the_request_to_another_path(
    make_enquiry, integrations, sandbox, run_queue
):
    enquiry = make_enquiry(email="")  # no acknowledgement: the documents are the only requests
    for document_id in [*HOSTILE, ".."]:
        Document.objects.create(enquiry=enquiry, document_id=document_id, version="1")
    with transaction.atomic():
        services.propose_receipt_work(enquiry)

    run_queue()

    stats = sandbox.stats()
    # Each id arrived at the documents path, as one encoded segment, and nowhere else; ".." was
    # not sent at all.
    assert stats["paths"] == {f"GET {path}": 1 for path in HOSTILE.values()}
    assert stats["requests"] == {}  # no route matched: no CRM (or other) handler ran
    operations = Operation.objects.filter(action="documents.extract")
    assert sorted(operations.values_list("state", flat=True)) == [OperationState.FAILED] * 4
    refused = operations.get(payload__document_id="..")
    assert "request not sent" in refused.attempts.get().error_message
    assert not Document.objects.exclude(extracted={}).exists()  # nothing stored as extracted


def test_crm_close_and_notify_encode_an_external_id(integrations, sandbox):
    close = Operation(
        action="crm.close_enquiry",
        payload={"external_id": "../../notify/messages", "reason": "compensate"},
        idempotency_key="k-close",
    )
    with pytest.raises(ConnectorError) as closing:
        CrmCloseConnector(integrations["crm"]).call(close)
    with pytest.raises(ConnectorError) as reading:
        NotifyConnector(integrations["notify"]).request(
            "GET", http.path("notify", "messages", "../crm/enquiries")
        )

    assert (closing.value.status, reading.value.status) == (404, 404)
    assert sandbox.stats()["paths"] == {
        "POST /crm/enquiries/..%2F..%2Fnotify%2Fmessages/close": 1,
        "GET /notify/messages/..%2Fcrm%2Fenquiries": 1,
    }
    assert sandbox.stats()["notify"]["total"] == 0
