"""Bodies that are valid JSON but not storable text, and requests shaped unusually (issue 18).

Each case once answered 5xx, stored the wrong thing or lost the body; now each gets a 4xx that
says what to change, and nothing is stored.
"""

import io
import json
import logging
import os

import pytest
import requests

from intake.models import Document, Enquiry, EventConflict, IntakeEvent, Revision
from intake.payload import LIMITS
from ledger.models import JournalEntry
from tests.intake.conftest import SECRET, URL, fixture_bytes, load_fixture
from tests.intake.signing import signed_headers

pytestmark = pytest.mark.django_db

VALID = {"email": "ada@example.org", "message": "My bin was not emptied.", "consent": True}


def nothing_stored():
    return (
        IntakeEvent.objects.count(),
        Enquiry.objects.count(),
        Revision.objects.count(),
        Document.objects.count(),
        EventConflict.objects.count(),
        JournalEntry.objects.count(),
    ) == (0, 0, 0, 0, 0, 0)


def body_with(**fields) -> bytes:
    # ensure_ascii (the default) writes a lone surrogate as the JSON escape "\ud800": valid JSON.
    return json.dumps({**VALID, **fields}).encode()


# --- 1. lone surrogates, in any string the payload carries -------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"name": "Ada \ud800"}, "name"),
        ({"email": "a\udfff@example.org"}, "email"),
        ({"message": "\ud800"}, "message"),
        ({"subject": "x\udc00y"}, "subject"),
        ({"service": "\ud83d"}, "service"),  # the first half of an emoji, alone
        ({"phone": "\ud800"}, "phone"),
        ({"documents": [{"id": "doc\ud800", "version": "1"}]}, "documents"),
        ({"documents": [{"id": "doc-1", "version": "\udfff"}]}, "documents"),
        ({"extra\ud800": "x"}, "extra\\ud800"),  # a key, shown escaped
        ({"documents": [{"id\ud800": "x", "version": "1"}]}, "documents"),
    ],
)
def test_a_lone_surrogate_anywhere_is_422_naming_the_field(post_event, fields, named):
    response = post_event(body_with(**fields))

    assert response.status_code == 422, response.content
    errors = response.json()["errors"]
    assert named in errors
    assert any("surrogate" in message for message in errors[named]), errors
    assert nothing_stored()


def test_a_surrogate_pair_is_one_character_and_accepted(post_event):
    response = post_event(body_with(name="Ada \ud83d\ude00"))  # json escapes an emoji this way

    assert response.status_code == 202
    assert Enquiry.objects.get().name == "Ada \U0001f600"


def test_a_surrogate_inside_a_nested_value_names_where(post_event):
    response = post_event(body_with(documents=[{"id": "doc-1", "version": "1"}, {"id": "\ud800"}]))

    assert response.status_code == 422
    assert response.json()["errors"]["documents"] == [
        "documents[1].id: remove the lone UTF-16 surrogate \\ud800 (character 1); a surrogate "
        "escape is only valid as one half of a pair."
    ]


def test_a_nul_anywhere_is_422_naming_the_field(post_event):
    response = post_event(body_with(documents=[{"id": "doc-1", "version": "1\u0000"}]))

    assert response.status_code == 422
    assert "NUL" in response.json()["errors"]["documents"][0]
    assert nothing_stored()


# --- 2. lengths are checked on what is stored -------------------------------------------------


def test_an_email_that_grows_when_lower_cased_is_422_not_a_500(post_event):
    email = "a@" + ".".join(["\u0130" * 20] * 11) + ".org"
    assert len(email) <= LIMITS["email"] < len(email.lower())

    response = post_event(body_with(email=email))

    assert response.status_code == 422, response.content
    assert response.json()["errors"]["email"] == [
        f"Shorten the email address to at most {LIMITS['email']} characters: it has "
        f"{len(email.lower())} once lower-cased."
    ]
    assert nothing_stored()


def test_every_limit_is_the_column_it_fills():
    for key, column in [
        ("name", "name"),
        ("email", "email"),
        ("phone", "phone"),
        ("subject", "subject"),
        ("service", "service_hint"),
    ]:
        assert LIMITS[key] == Enquiry._meta.get_field(column).max_length, key


# --- 3. duplicate keys, at any depth ------------------------------------------------------------


def test_a_duplicate_key_is_422_not_last_wins(post_event):
    body = b'{"email": "a@example.org", "message": "hi", "consent": false, "consent": true}'

    response = post_event(body)

    assert response.status_code == 422
    assert response.json()["errors"] == {
        "consent": ["This key appears more than once; send each key once."]
    }
    assert nothing_stored()


def test_a_duplicate_key_in_a_nested_object_is_422(post_event):
    body = (
        b'{"email": "a@example.org", "message": "hi", "consent": true, '
        b'"documents": [{"id": "doc-1", "version": "1", "id": "doc-2"}]}'
    )

    response = post_event(body)

    assert response.status_code == 422
    assert response.json()["errors"] == {
        "documents": ['documents[0]: the key "id" appears more than once; send each key once.']
    }
    assert nothing_stored()


# --- 8 (intake half). document ids and versions keep to a documented character set -------------


@pytest.mark.parametrize(
    ("doc_id", "version"),
    [
        ("../crm/enquiries", "1"),
        ("x?version=9&a=b#frag", "1"),
        ("..%2F..%2Fcrm%2Fenquiries", "1"),
        ("..", "1"),
        (".hidden", "1"),
        ("a/b", "1"),
        ("caf\u00e9", "1"),
        ("doc 1", "1"),
        ("doc-1", "1/../2"),
        ("doc-1", "1?x=2"),
        ("doc-1", "-1"),
        ("doc-1", '"{8E5A1D3C-4F2B-4C1A-9D3E-2B7C6A5F4E31},4"'),  # an ETag with its quotes
        ("doc-1", "{8E5A1D3C} 4"),
        ("doc-1", ",4"),
        ("doc{1}", "1"),
    ],
)
def test_a_document_id_or_version_outside_the_character_set_is_422(post_event, doc_id, version):
    response = post_event(body_with(documents=[{"id": doc_id, "version": version}]))

    assert response.status_code == 422
    (message,) = response.json()["errors"]["documents"]
    assert message.startswith("Document 1: ")
    assert "letters, digits" in message
    assert nothing_stored()


def test_ids_and_versions_inside_the_character_set_are_stored(post_event):
    documents = [
        {"id": "doc-17", "version": "2"},
        {"id": "Lease_2024.pdf", "version": "v1.0"},
        {"id": "urn:doc:42", "version": 3},
        {"id": "a" * 200, "version": "b" * 80},
        # SharePoint's ETag for a file, its version: "{GUID},N" without the quotes.
        {"id": "Permit.pdf", "version": "{8E5A1D3C-4F2B-4C1A-9D3E-2B7C6A5F4E31},12"},
    ]
    response = post_event(body_with(documents=documents))

    assert response.status_code == 202, response.content
    assert sorted(Document.objects.values_list("document_id", "version")) == sorted(
        [
            ("doc-17", "2"),
            ("Lease_2024.pdf", "v1.0"),
            ("urn:doc:42", "3"),
            ("a" * 200, "b" * 80),
            ("Permit.pdf", "{8E5A1D3C-4F2B-4C1A-9D3E-2B7C6A5F4E31},12"),
        ]
    )


def test_a_version_longer_than_80_characters_is_422(post_event):
    response = post_event(body_with(documents=[{"id": "doc-1", "version": "b" * 81}]))

    assert response.status_code == 422
    (message,) = response.json()["errors"]["documents"]
    assert "within 80 characters" in message
    assert nothing_stored()


# --- 5. the path without its trailing slash -----------------------------------------------------


def test_the_path_without_a_trailing_slash_is_accepted_not_redirected(post_event):
    response = post_event(fixture_bytes("phone_only.json"), url="/intake/events/website")

    assert response.status_code == 202, response.content
    assert Enquiry.objects.get().message == load_fixture("phone_only.json")["message"]


# --- 6. a refused signature says what is wrong in the sender's terms ---------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"webhook-signature": None}, "Signature refused: missing header webhook-signature."),
        (
            {"webhook-signature": "v1,a,b"},
            "Signature refused: the webhook-signature header is malformed; send space-separated "
            '"v1,<base64 signature>" entries.',
        ),
        (
            {"webhook-signature": "v1,%%%"},
            "Signature refused: the webhook-signature header is malformed; send space-separated "
            '"v1,<base64 signature>" entries.',
        ),
        (
            {"webhook-signature": "v2,AAAA"},
            "Signature refused: the webhook-signature header has no v1 signature.",
        ),
        (
            {"webhook-timestamp": "1e9"},
            "Signature refused: webhook-timestamp must be whole seconds since the Unix epoch.",
        ),
        (
            {"webhook-timestamp": "1"},
            "Signature refused: webhook-timestamp is too old (outside the 300-second tolerance); "
            "check the sender's clock.",
        ),
        (
            {"webhook-signature": "v1,AAAA"},
            "Signature refused: no signature matches this body with a secret of this source.",
        ),
    ],
)
def test_a_401_says_what_is_wrong_without_internal_text(client, caplog, change, expected):
    body = fixture_bytes("phone_only.json")
    headers = {**signed_headers(body, SECRET), **change}
    headers = {k: v for k, v in headers.items() if v is not None}

    response = client.generic(
        "POST", "/intake/events/website/", body, content_type="application/json", headers=headers
    )

    assert response.status_code == 401
    assert response.json() == {"error": expected}
    assert "Error" not in response.content.decode()
    assert nothing_stored()


def test_the_librarys_detail_goes_to_the_log_not_the_sender(client, caplog):
    body = fixture_bytes("phone_only.json")
    headers = {**signed_headers(body, SECRET), "webhook-signature": "v1,AAAA"}

    with caplog.at_level(logging.INFO, logger="intake.signing"):
        response = client.generic(
            "POST", URL, body, content_type="application/json", headers=headers
        )

    assert response.status_code == 401
    (record,) = [r for r in caplog.records if r.name == "intake.signing"]
    assert "WebhookVerificationError: No matching signature found" in record.getMessage()
    assert "WebhookVerificationError" not in response.content.decode()


# --- 4. a body sent without Content-Length (Transfer-Encoding: chunked) -----------------------


def chunked_environ(body: bytes, *, terminated: bool) -> dict:
    """What a WSGI server hands over for a chunked request: no CONTENT_LENGTH, and (when it
    de-chunks) a stream that ends with the body."""
    environ = {
        "wsgi.input": io.BytesIO(body),
        "HTTP_TRANSFER_ENCODING": "chunked",
        "CONTENT_TYPE": "application/json",
    }
    if terminated:
        environ["wsgi.input_terminated"] = True
    return environ


def test_a_chunked_body_on_a_terminated_stream_is_read(client):
    body = fixture_bytes("phone_only.json")

    response = client.generic(
        "POST", URL, headers=signed_headers(body, SECRET), **chunked_environ(body, terminated=True)
    )

    assert response.status_code == 202, response.content
    assert IntakeEvent.objects.get().body.encode() == body


def test_a_chunked_body_the_server_cannot_end_is_411(client):
    body = fixture_bytes("phone_only.json")

    response = client.generic(
        "POST", URL, headers=signed_headers(body, SECRET), **chunked_environ(body, terminated=False)
    )

    assert response.status_code == 411
    assert "Content-Length" in response.json()["error"]
    assert nothing_stored()


def test_a_chunked_body_over_the_limit_is_413_after_reading_no_more_than_the_limit(
    client, settings
):
    settings.INTAKE_MAX_BODY_BYTES = 1024
    body = json.dumps({**VALID, "message": "x" * 5000}).encode()
    environ = chunked_environ(body, terminated=True)

    response = client.generic("POST", URL, headers=signed_headers(body, SECRET), **environ)

    assert response.status_code == 413
    assert environ["wsgi.input"].tell() == 1025
    assert nothing_stored()


@pytest.fixture
def web_server(tmp_path):
    """gunicorn as `make run` serves the application, on this test run's database."""
    from harness.drill.processes import WebServer
    from tests.ledger.conftest import child_database_url

    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "INTAKE_SECRETS": json.dumps({"website": [SECRET]}),
    }
    server = WebServer(tmp_path / "web.log", env, workers=1, threads=2).start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_server_reads_a_chunked_signed_body(web_server):
    body = fixture_bytes("phone_only.json")
    headers = {"Content-Type": "application/json", **signed_headers(body, SECRET)}

    # A generator makes requests send Transfer-Encoding: chunked and no Content-Length.
    def pieces():
        for start in range(0, len(body), 16):
            yield body[start : start + 16]

    with requests.Session() as session:
        session.trust_env = False
        response = session.post(
            f"{web_server.url}{URL}", data=pieces(), headers=headers, timeout=30
        )
        # The same without the trailing slash: accepted, not redirected.
        again = session.post(
            f"{web_server.url}/intake/events/website",
            data=body,
            headers={"Content-Type": "application/json", **signed_headers(body, SECRET)},
            timeout=30,
            allow_redirects=False,
        )

    assert response.request.headers.get("Transfer-Encoding") == "chunked"
    assert "Content-Length" not in response.request.headers
    assert response.status_code == 202, (response.text, web_server.log())
    assert again.status_code == 202, again.text
    assert sorted(IntakeEvent.objects.values_list("body", flat=True)) == [body.decode()] * 2
    assert Enquiry.objects.count() == 2


@pytest.mark.parametrize(
    ("email", "shown"),
    [
        # Django's address rule allows these inside quotes; Python's e-mail headers take \x0b,
        # \x0c and \x1c-\x1e as line breaks (str.splitlines).
        ('"a\x0bb"@example.org', "U+000B"),
        ('"a\x0cBcc: x@evil.example"@example.org', "U+000C"),
        ('"a\x1cb"@example.org', "U+001C"),
        ('"a\x1eb"@example.org', "U+001E"),
        ('"a\x7fb"@example.org', "U+007F"),
        ('"a\x01b"@example.org', "U+0001"),
    ],
)
def test_a_control_character_inside_a_quoted_address_is_422_naming_the_email(
    post_event, email, shown
):
    """Django's address rule allows controls inside a quoted local part; in the
    acknowledgement's To: header a line break there would start a header of its own."""
    response = post_event(body_with(email=email))

    assert response.status_code == 422, response.content
    [message] = response.json()["errors"]["email"]
    assert "control character" in message and shown in message
    assert nothing_stored()


def test_a_quoted_address_without_controls_is_still_accepted(post_event):
    assert post_event(body_with(email='"a!b"@example.org')).status_code == 202
