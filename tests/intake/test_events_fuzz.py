"""No header or body a sender can send makes the intake endpoint answer 5xx, and a refused
request leaves no row behind.

Text is drawn from the full Unicode range, lone surrogates included (Hypothesis leaves out
category Cs unless asked), with characters that change length when their case changes, and
objects are sent with duplicated keys at any depth. A run takes the Hypothesis profile's count
(tests/conftest.py: 100 examples, 1,000 under CI); a long run (docs/reliability.md, "Malformed
input"):

    INTAKE_FUZZ_EXAMPLES=2500 INTAKE_FUZZ_REPORT=/tmp/fuzz.json \\
        python -m pytest tests/intake/test_events_fuzz.py -q
"""

import json
import os
import time
import uuid
from collections import Counter

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from intake.models import Document, Enquiry, EventConflict, IntakeEvent, Revision
from tests.intake.conftest import SECRET
from tests.intake.signing import signed_headers

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("INTAKE_FUZZ_EXAMPLES") or settings.default.max_examples)
REPORT = os.environ.get("INTAKE_FUZZ_REPORT", "")

# Characters whose lower-case (or upper-case) form is longer, or differs in odd ways: the
# e-mail address is stored lower-cased.
CASE_CHANGING = "\u0130\u00df\ufb01\ufb03\u0390\u1e9e\u03a3\u01c5\u0149\u1f80\u2126\u212a"
# The full range, category Cs (lone surrogates) included. Surrogates and case-changing
# characters are also drawn as pieces of their own: merged into one alphabet with a million
# code points they would appear in about one string in 500.
any_character = st.characters(exclude_categories=())
any_text = st.lists(
    st.text(any_character, max_size=8)
    | st.sampled_from(CASE_CHANGING)
    | st.characters(categories=["Cs"]),
    max_size=6,
).map("".join)
# Storable text (no Cs), still with case-changing characters: so that some bodies are accepted
# and what is stored is exercised too.
storable_text = st.lists(st.text(max_size=8) | st.sampled_from(CASE_CHANGING), max_size=6).map(
    "".join
)

# Header values travel through WSGI as latin-1 text; anything outside it cannot arrive.
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255), max_size=80)
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | any_text
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(any_text, children, max_size=4)
    ),
    max_leaves=12,
)
growing_emails = st.builds(
    lambda label, labels: "a@" + ".".join([label] * labels) + ".org",
    st.text(st.sampled_from(CASE_CHANGING), min_size=1, max_size=25),
    st.integers(1, 12),
)
emails = st.one_of(
    st.just("a@example.org"),
    st.just("a@example.org"),
    st.sampled_from(["nope", "", "A\u0130@example.org"]),
    growing_emails,
    st.builds(lambda local: f"{local}@example.org", any_text),
)
document_ids = (
    st.sampled_from(
        [
            "doc-17",
            "../crm/enquiries",
            "x?version=9&a=b#frag",
            "..%2F..%2Fcrm%2Fenquiries",
            "..",
            "",
        ]
    )
    | any_text
)
payload_like = st.fixed_dictionaries(
    {},
    optional={
        "name": any_text | json_values,
        "email": emails | json_values,
        "phone": st.sampled_from(["07700 900123", "++", ""]) | json_values,
        "message": any_text | json_values,
        "subject": any_text | json_values,
        "service": any_text | json_values,
        "documents": st.lists(
            st.fixed_dictionaries({"id": document_ids, "version": st.integers(-1, 3) | any_text}),
            max_size=3,
        )
        | json_values,
        "consent": st.booleans() | json_values,
    },
)
valid_payloads = st.fixed_dictionaries(
    {"email": emails, "message": storable_text | any_text, "consent": st.just(True)},
    optional={
        "name": storable_text | any_text,
        "documents": st.lists(
            st.fixed_dictionaries({"id": document_ids, "version": st.integers(-1, 3) | any_text}),
            max_size=3,
        ),
    },
)


def encode(value, ascii_only: bool) -> bytes:
    """JSON as a sender writes it: with \\u escapes (a lone surrogate becomes "\\ud800", valid
    JSON), or raw UTF-8 (where a lone surrogate cannot be encoded and goes out as invalid
    bytes)."""
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def with_duplicates(pairs) -> str:
    """A JSON object text with these (key, value) pairs in order, repeats kept."""
    return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"


# A key repeated at the top level, or inside a document object.
top_level_duplicates = st.builds(
    lambda payload, key, value: with_duplicates([*payload.items(), (key, value)]).encode(),
    valid_payloads,
    st.sampled_from(["consent", "email", "message", "name"]),
    json_values,
)
nested_duplicates = st.builds(
    lambda payload, doc_id: (
        json.dumps(payload)[:-1]
        + ', "documents": [{"id": "doc-1", "version": "1", "id": '
        + json.dumps(doc_id)
        + "}]}"
    ).encode(),
    valid_payloads.map(lambda v: {k: w for k, w in v.items() if k != "documents"}),
    document_ids,
)
valid_bodies = st.builds(encode, valid_payloads, st.booleans())
bodies = st.one_of(
    valid_bodies,
    valid_bodies,  # twice: most malformed text hides in an otherwise acceptable body
    st.builds(encode, payload_like, st.booleans()),
    st.builds(encode, json_values, st.booleans()),
    top_level_duplicates,
    nested_duplicates,
    st.binary(max_size=200),
    st.just(b'{"message": "hi", "email": "a@example.org", "consent": true'),  # truncated
    st.just(b"[" * 5000),  # deep nesting
    # issue 26: valid JSON nested 1,000 deep (said to be too deep, not "not JSON")
    st.just(
        b'{"message": "hi", "consent": true, "email": "a@b.org", "documents": '
        + b"[" * 1000
        + b"]" * 1000
        + b"}"
    ),
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
        "content-type": st.sampled_from(
            [
                "application/json",
                "text/plain",
                "",
                "a/b+json",
                # issue 26: a form declared, with and without its boundary
                "multipart/form-data",
                "multipart/form-data; boundary=xyz",
                "application/x-www-form-urlencoded",
            ]
        )
        | header_text,
    },
)

# What every example saw, for the long run's report.
_tally = {"requests": 0, "statuses": Counter(), "rows_left_by_refusals": 0}


def _rows():
    return {
        "events": IntakeEvent.objects.count(),
        "enquiries": Enquiry.objects.count(),
        "revisions": Revision.objects.count(),
        "documents": Document.objects.count(),
        "conflicts": EventConflict.objects.count(),
    }


@pytest.fixture(scope="module", autouse=True)
def fuzz_report():
    yield
    if REPORT and _tally["requests"]:
        with open(REPORT, "w") as out:
            json.dump(
                {
                    "examples_setting": EXAMPLES,
                    "requests": _tally["requests"],
                    "answers_by_status": dict(sorted(_tally["statuses"].items())),
                    "answers_5xx": sum(n for s, n in _tally["statuses"].items() if s >= 500),
                    "rows_left_by_refused_requests": _tally["rows_left_by_refusals"],
                },
                out,
                indent=2,
            )


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(
    body=bodies,
    headers=header_sets,
    signed=st.sampled_from([True, True, True, False]),
    source=st.sampled_from(["website", "website", "website", "nobody"]),
    path_slash=st.sampled_from(["/", "/", ""]),
    fresh_id=st.sampled_from([True, True, True, False]),
)
def test_malformed_input_never_gets_a_5xx(
    client, body, headers, signed, source, path_slash, fresh_id
):
    if headers.get("webhook-timestamp") == "now":
        headers["webhook-timestamp"] = str(int(time.time()))
    if headers.get("webhook-signature") == "valid" or signed:
        # Most examples are correctly signed, so the body reaches JSON and field validation;
        # most under a new event ID (a repeated one is answered 200/409 before validation).
        msg_id = headers.get("webhook-id") or "msg_fuzz"
        if fresh_id:
            msg_id = f"msg_{uuid.uuid4().hex}"
        headers.update(signed_headers(body, SECRET, msg_id))
    content_type = headers.pop("content-type", "application/json")
    before = _rows()

    try:
        response = client.generic(
            "POST",
            f"/intake/events/{source}{path_slash}",
            body,
            content_type=content_type,
            headers=headers,
        )
    except Exception:
        # The test client raises what the view raised: for a server, a 500.
        _tally["requests"] += 1
        _tally["statuses"][500] += 1
        raise
    status = response.status_code
    after = _rows()
    _tally["requests"] += 1
    _tally["statuses"][status] += 1

    event(f"status {status}")
    assert status in {200, 202, 401, 409, 413, 415, 422}, response.content
    if status not in (200, 202):
        # Refused: nothing stored but, for a 409, the conflicting delivery (recorded on purpose).
        allowed = {"conflicts": 1 if status == 409 else 0}
        left = {k: after[k] - before[k] - allowed.get(k, 0) for k in after}
        _tally["rows_left_by_refusals"] += sum(abs(n) for n in left.values())
        assert not any(left.values()), (status, left)
    if status == 200:
        assert after == before  # a repeat stores nothing new
    assert after["events"] == after["enquiries"] == after["revisions"]


# --- the same event, re-serialised (docs/intake.md, "The same event") ---------------------------


def _reserialised(value, form):
    """``value`` with every string in Unicode ``form`` and every object's keys reversed."""
    import unicodedata

    if isinstance(value, str):
        return unicodedata.normalize(form, value)
    if isinstance(value, dict):
        return {_reserialised(k, form): _reserialised(v, form) for k, v in reversed(value.items())}
    if isinstance(value, list):
        return [_reserialised(v, form) for v in value]
    return value


@settings(
    max_examples=max(EXAMPLES // 10, 20),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    payload=valid_payloads,
    form=st.sampled_from(["NFC", "NFD"]),
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, 2]),
)
def test_the_same_event_reserialised_is_answered_as_a_repeat(
    client, payload, form, ascii_only, indent
):
    first_body = encode(payload, True)
    msg_id = f"msg_{uuid.uuid4().hex}"
    first = client.generic(
        "POST",
        "/intake/events/website/",
        first_body,
        content_type="application/json",
        headers=signed_headers(first_body, SECRET, msg_id),
    )
    if first.status_code != 202:
        return
    again = json.dumps(_reserialised(payload, form), ensure_ascii=ascii_only, indent=indent).encode(
        "utf-8", "surrogatepass"
    )
    second = client.generic(
        "POST",
        "/intake/events/website/",
        again,
        content_type="application/json",
        headers=signed_headers(again, SECRET, msg_id),
    )
    assert second.status_code == 200, (again, second.content)
    assert second.json()["reference"] == first.json()["reference"]
