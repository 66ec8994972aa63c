"""No header or body a sender can send makes the intake endpoint answer 5xx."""

import json
import time

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from intake.models import Enquiry, IntakeEvent
from tests.intake.conftest import SECRET
from tests.intake.signing import signed_headers

pytestmark = pytest.mark.django_db

# Header values travel through WSGI as latin-1 text; anything outside it cannot arrive.
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=80)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
payload_like = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values,
        "email": st.sampled_from(["a@example.org", "nope", ""]) | json_values,
        "phone": st.sampled_from(["07700 900123", "++", ""]) | json_values,
        "message": st.text(max_size=40) | json_values,
        "subject": json_values,
        "service": json_values,
        "documents": json_values,
        "consent": st.booleans() | json_values,
    },
)
valid_payloads = st.fixed_dictionaries(
    {"email": st.just("a@example.org"), "message": st.text(max_size=50), "consent": st.just(True)},
    optional={
        "name": st.text(max_size=20),
        "documents": st.lists(
            st.fixed_dictionaries(
                {"id": st.text(max_size=10), "version": st.integers(-1, 3) | st.text(max_size=3)}
            ),
            max_size=3,
        ),
    },
)
bodies = st.one_of(
    valid_payloads.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    payload_like.map(lambda v: json.dumps(v).encode()),
    st.just(b'{"message": "hi", "email": "a@example.org", "consent": true'),  # truncated
    st.just(b"[" * 5000),  # deep nesting
)
timestamps = st.one_of(
    st.just("now"),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    header_text,
)
signatures = st.one_of(
    st.just("valid"),
    header_text,
    st.lists(
        st.sampled_from(["v1,", "v1", "v2,", ",", "v1,AAAA", "v1,%%", " ", "v1,a,b"]), max_size=4
    ).map("".join),
)
header_sets = st.fixed_dictionaries(
    {},
    optional={
        "webhook-id": header_text,
        "webhook-timestamp": timestamps,
        "webhook-signature": signatures,
        "content-type": st.sampled_from(["application/json", "text/plain", "", "a/b+json"])
        | header_text,
    },
)


@settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    body=bodies,
    headers=header_sets,
    signed=st.booleans(),
    source=st.sampled_from(["website", "website", "nobody"]),
)
def test_malformed_input_never_gets_a_5xx(client, body, headers, signed, source):
    if headers.get("webhook-timestamp") == "now":
        headers["webhook-timestamp"] = str(int(time.time()))
    if headers.get("webhook-signature") == "valid" or signed:
        # Half the examples are correctly signed, so the body reaches JSON and field validation.
        msg_id = headers.get("webhook-id") or "msg_fuzz"
        headers.update(signed_headers(body, SECRET, msg_id))
    content_type = headers.pop("content-type", "application/json")
    events_before = IntakeEvent.objects.count()

    response = client.generic(
        "POST", f"/intake/events/{source}/", body, content_type=content_type, headers=headers
    )

    event(f"status {response.status_code}")
    assert response.status_code in {200, 202, 401, 409, 413, 415, 422}, response.content
    if response.status_code != 202:
        assert IntakeEvent.objects.count() == events_before
    assert IntakeEvent.objects.count() == Enquiry.objects.count()
