"""The HTTP wrapper against a real server: every failure gets the class that says what is
known (transient = never sent, uncertain = sent without an answer, invalid, auth)."""

import json

import pytest

from harness.processes import free_port
from ledger import http
from ledger.connectors.base import ConnectorError, ErrorKind


def post(sandbox, reference="ENQ-HTTP", timeout=2.0):
    return http.send(
        "POST",
        sandbox.url + "/crm/enquiries",
        timeout=timeout,
        json_body={"reference": reference},
        headers={"Idempotency-Key": f"k-{reference}"},
    )


def test_success_returns_the_parsed_body(sandbox):
    result = post(sandbox)
    assert result.status == 201
    assert result.body["reference"] == "ENQ-HTTP"
    assert sandbox.stats()["crm"]["total"] == 1


def test_a_timeout_is_required():
    with pytest.raises(ValueError, match="timeout"):
        http.send("GET", "http://127.0.0.1:1/", timeout=0)


def test_connection_refused_is_transient():
    with pytest.raises(ConnectorError) as caught:
        http.send("GET", f"http://127.0.0.1:{free_port()}/crm/enquiries", timeout=1.0)
    assert caught.value.kind is ErrorKind.TRANSIENT


@pytest.mark.parametrize(
    ("mode", "kind", "status"),
    [
        ("error_503", ErrorKind.TRANSIENT, 503),
        ("error_401", ErrorKind.AUTH, 401),
        ("error_422", ErrorKind.INVALID, 422),
    ],
)
def test_status_faults_are_classified(sandbox, mode, kind, status):
    sandbox.fault("crm.create", mode)
    with pytest.raises(ConnectorError) as caught:
        post(sandbox)
    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert sandbox.stats()["crm"]["total"] == 0  # the destination wrote nothing


def test_bad_request_is_invalid_with_the_destination_message(sandbox):
    with pytest.raises(ConnectorError) as caught:
        http.send("POST", sandbox.url + "/crm/enquiries", timeout=2.0, json_body={})
    assert caught.value.kind is ErrorKind.INVALID
    assert "reference" in caught.value.message


def test_read_timeout_after_the_destination_committed_is_uncertain(sandbox):
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=1500)
    with pytest.raises(ConnectorError) as caught:
        post(sandbox, timeout=0.5)
    assert caught.value.kind is ErrorKind.UNCERTAIN
    assert sandbox.stats()["crm"]["total"] == 1  # which is why it must not count as failed


def test_connection_reset_after_sending_is_uncertain(sandbox):
    sandbox.fault("crm.create", "reset_before_commit")
    with pytest.raises(ConnectorError) as caught:
        post(sandbox)
    assert caught.value.kind is ErrorKind.UNCERTAIN
    assert sandbox.stats()["crm"]["total"] == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # BottleCRM's shape (and DRF's): the field errors, never the flag beside them.
        (
            {"error": True, "errors": {"name": ["Case already exists with this name"]}},
            "400: name: Case already exists with this name",
        ),
        (
            {"errors": {"custom_fields": {"ward": "is required"}, "non_field_errors": ["No."]}},
            "400: custom_fields.ward: is required; No.",
        ),
        ({"error": True, "errors": "Admin access required"}, "400: Admin access required"),
        ({"error": True}, '400: {"error": true}'),
        ({"error": "reference is required", "detail": ""}, "400: reference is required"),
        ("plain text refusal", "400: plain text refusal"),
    ],
)
def test_a_refusal_is_told_in_the_destinations_own_words(body, message):
    text = body if isinstance(body, str) else json.dumps(body)
    error = http.status_error(http.HttpResult(400, body, text))
    assert (error.kind, error.message) == (ErrorKind.INVALID, message)


TOKEN = "tok-s3cret/+value"


def test_a_redirect_is_an_answer_and_never_followed(sandbox):
    """A same-host redirect would carry the token again; a followed one would call another
    path. Neither happens: the 302 is the outcome, uncertain (the destination may have acted)."""
    sandbox.fault("crm.create", "redirect")
    with pytest.raises(ConnectorError) as caught:
        http.send(
            "POST",
            sandbox.url + "/crm/enquiries",
            timeout=2.0,
            json_body={"reference": "ENQ-REDIRECT"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert (caught.value.kind, caught.value.status) == (ErrorKind.UNCERTAIN, 302)
    assert "not followed" in caught.value.message
    assert caught.value.answer.startswith("HTTP 302, application/json")
    stats = sandbox.stats()
    assert stats["paths"] == {"POST /crm/enquiries": 1}  # nothing else was called
    assert stats["crm"]["total"] == 0


def test_a_destination_echoing_the_token_never_hands_it_back(sandbox):
    sandbox.fault("crm.create", "echo_headers")
    with pytest.raises(ConnectorError) as caught:
        http.send(
            "POST",
            sandbox.url + "/crm/enquiries",
            timeout=2.0,
            json_body={"reference": "ENQ-ECHO"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    error = caught.value
    assert error.status == 400 and "Authorization" in error.body  # it was echoed
    for text in (error.message, error.body, str(error), repr(error)):
        assert "s3cret" not in text, text
    assert "[redacted]" in error.body
    assert sandbox.stats()["crm"]["total"] == 0


def test_an_address_with_a_user_and_password_is_not_called(sandbox):
    with_credentials = sandbox.url.replace("http://", "http://admin:pw-s3cret@")
    with pytest.raises(ConnectorError) as caught:
        http.send("GET", with_credentials + "/crm/enquiries", timeout=2.0)
    assert caught.value.kind is ErrorKind.INVALID
    assert "s3cret" not in caught.value.message
    assert sandbox.stats()["paths"] == {}


@pytest.mark.parametrize(
    "secret_form",
    [TOKEN, "tok-s3cret%2F%2Bvalue", json.dumps(TOKEN)[1:-1]],
)
def test_redact_replaces_each_form_a_secret_can_come_back_in(secret_form):
    text = f"you sent Bearer {secret_form} to us"
    assert "s3cret" not in http.redact(
        text, http.secrets_sent({"Authorization": f"Bearer {TOKEN}"})
    )


def test_a_2xx_echoing_the_token_comes_back_redacted_and_storable():
    # Redacting re-reads the answer: what it reads must be cleaned again (ledger.storable), or
    # a JSON "\u0000" escape comes back as a NUL that PostgreSQL refuses when the result is kept.
    from tests.ledger.oddserver import OddServer

    body = json.dumps({"echo": f"Bearer {TOKEN}", "x": "a\u0000b"}).encode()
    with OddServer(200, body, {"Content-Type": "application/json"}) as odd:
        result = http.send(
            "GET", odd.url + "/x", timeout=2.0, headers={"Authorization": f"Bearer {TOKEN}"}
        )
    assert odd.requests == [("GET", "/x")]
    assert result.body["echo"] == "[redacted]"
    assert "\x00" not in result.body["x"] and "\x00" not in result.text
    assert TOKEN not in result.text
