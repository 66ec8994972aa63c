"""A property of the whole receipt path: any body intake answers 202 reaches ready_for_review,
or a queue row with an owner. Never a 202 and then nothing.

Bodies are drawn from the contract's edges (docs/intake.md): document ids of up to 200
characters and versions of up to 40 from their alphabets, many documents, odd but storable
text. Each accepted enquiry's receipt task runs (as often as a person would need before the
queue shows it), then its suggestion; no destination is called (the suggester runs in
process, and the acknowledgement and extractions are only proposed).
"""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intake.models import Enquiry, EnquiryState
from ledger import receipt, tasks
from ledger.models import Operation
from recovery.models import ResponsePolicy
from recovery.queue.sources import all_rows
from tests.intake.conftest import SECRET
from tests.intake.signing import signed_headers
from tests.intake.test_events_fuzz import emails, storable_text

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("RECEIPT_PROPERTY_EXAMPLES") or settings.default.max_examples)

document_ids = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,199}\Z", fullmatch=True)
versions = st.from_regex(r"\A[A-Za-z0-9{][A-Za-z0-9._{},-]{0,79}\Z", fullmatch=True) | st.integers(
    0, 10**30
)
edge_documents = st.lists(
    st.fixed_dictionaries({"id": document_ids, "version": versions}),
    max_size=4,
) | st.just([{"id": "d" * 200, "version": "v" * 80}])
bodies = st.fixed_dictionaries(
    {"email": emails, "message": storable_text, "consent": st.just(True)},
    optional={"name": storable_text, "subject": storable_text, "documents": edge_documents},
)


@pytest.fixture
def owned_queues(make_user, settings):
    settings.INTAKE_SECRETS = {"website": [SECRET]}
    ResponsePolicy.objects.create(queue="", owner=make_user("coordinator", username="on-call"))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=bodies)
def test_every_enquiry_answered_202_reaches_review_or_an_owned_queue(client, owned_queues, payload):
    body = json.dumps(payload).encode()
    response = client.generic(
        "POST",
        "/intake/events/website/",
        body,
        content_type="application/json",
        headers=signed_headers(body, SECRET),
    )
    assert response.status_code in {202, 422}, response.content
    if response.status_code != 202:
        return
    enquiry = Enquiry.objects.get(reference=json.loads(response.content)["reference"])

    # The receipt's task, then the sweeper's retries of it, as long as it stays pending.
    for _ in range(receipt.FAILURES_FOR_A_PERSON):
        tasks.take_up_receipt(str(enquiry.pk))
    suggestion = Operation.objects.filter(enquiry=enquiry, action="suggest.category").first()
    if suggestion is not None:
        tasks.execute_operation(str(suggestion.pk))

    enquiry.refresh_from_db()
    if enquiry.state == EnquiryState.READY_FOR_REVIEW:
        return
    rows = [r for r in all_rows() if r["q_key"] == enquiry.reference]
    assert rows, f"{enquiry.reference} is {enquiry.state} and in no queue"
    assert all(r["q_owner"] is not None for r in rows), rows
