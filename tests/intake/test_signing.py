from datetime import UTC, datetime, timedelta

import pytest

from intake import signing
from tests.intake.conftest import NEW_SECRET, SECRET, load_fixture
from tests.intake.signing import signed_headers

VECTOR = load_fixture("reference_vector.json")
VECTOR_TIME = datetime.fromtimestamp(VECTOR["timestamp"], tz=UTC)


def vector_headers(**changes):
    headers = {
        "webhook-id": VECTOR["msg_id"],
        "webhook-timestamp": str(VECTOR["timestamp"]),
        "webhook-signature": VECTOR["signature"],
    }
    headers.update(changes)
    return {k: v for k, v in headers.items() if v is not None}


def verify(headers, body, secrets=(SECRET,), now=VECTOR_TIME, tolerance=300):
    signing.verify(list(secrets), headers, body, now=now, tolerance_seconds=tolerance)


def test_reference_vector_signs_as_published():
    body = VECTOR["payload"].encode()
    assert (
        signing.sign(VECTOR["secret"], VECTOR["msg_id"], VECTOR["timestamp"], body)
        == (VECTOR["signature"])
    )


def test_reference_vector_verifies():
    verify(vector_headers(), VECTOR["payload"].encode(), secrets=[VECTOR["secret"]])


def test_header_names_are_case_insensitive():
    headers = {k.title(): v for k, v in vector_headers().items()}
    verify(headers, VECTOR["payload"].encode())


def test_any_secret_of_a_rotation_verifies():
    verify(vector_headers(), VECTOR["payload"].encode(), secrets=[NEW_SECRET, SECRET])


def test_one_of_several_signatures_in_the_header_verifies():
    other = "v1,bm90LXRoZS1yaWdodC1zaWduYXR1cmUtYXQtYWxsLi4uLi4uLi4uLi4uLg=="
    headers = vector_headers(**{"webhook-signature": f"{other} {VECTOR['signature']}"})
    verify(headers, VECTOR["payload"].encode())


@pytest.mark.parametrize(
    ("headers", "body", "secrets", "now"),
    [
        pytest.param(
            vector_headers(), b'{"test": 2432232315}', [SECRET], VECTOR_TIME, id="tampered"
        ),
        pytest.param(
            vector_headers(),
            VECTOR["payload"].encode(),
            [NEW_SECRET],
            VECTOR_TIME,
            id="wrong-secret",
        ),
        pytest.param(
            vector_headers(),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME + timedelta(seconds=301),
            id="too-old",
        ),
        pytest.param(
            vector_headers(),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME - timedelta(seconds=301),
            id="too-new",
        ),
        pytest.param(
            vector_headers(**{"webhook-id": None}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="no-id",
        ),
        pytest.param(
            vector_headers(**{"webhook-timestamp": None}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="no-timestamp",
        ),
        pytest.param(
            vector_headers(**{"webhook-signature": None}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="no-signature",
        ),
        pytest.param(
            vector_headers(**{"webhook-timestamp": "1614265330.0"}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="float-ts",
        ),
        pytest.param(
            vector_headers(**{"webhook-signature": "v1"}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="no-comma",
        ),
        pytest.param(
            vector_headers(**{"webhook-signature": "v1,%%%"}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="bad-base64",
        ),
        pytest.param(
            vector_headers(**{"webhook-signature": "v1,a,b"}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="extra-comma",
        ),
        pytest.param(
            vector_headers(**{"webhook-signature": "v2," + VECTOR["signature"][3:]}),
            VECTOR["payload"].encode(),
            [SECRET],
            VECTOR_TIME,
            id="other-version",
        ),
        pytest.param(vector_headers(), b"\xff\xfe", [SECRET], VECTOR_TIME, id="not-utf8"),
        pytest.param(
            vector_headers(), VECTOR["payload"].encode(), [], VECTOR_TIME, id="no-secrets"
        ),
        pytest.param(
            vector_headers(),
            VECTOR["payload"].encode(),
            ["whsec_%%%"],
            VECTOR_TIME,
            id="broken-secret",
        ),
    ],
)
def test_refused(headers, body, secrets, now):
    with pytest.raises(signing.SignatureRefused):
        verify(headers, body, secrets=secrets, now=now)


def test_tolerance_comes_from_settings():
    body = VECTOR["payload"].encode()
    later = VECTOR_TIME + timedelta(seconds=900)
    verify(vector_headers(), body, now=later, tolerance=1000)
    with pytest.raises(signing.SignatureRefused, match="too old"):
        verify(vector_headers(), body, now=later, tolerance=600)


def test_the_tolerance_is_enforced_on_a_correctly_signed_delivery():
    """The window is ours (not the package's five minutes on its own clock): a delivery whose
    signature matches is accepted up to the tolerance either side and refused one second past."""
    body = b'{"hello": "world"}'
    sent = 1_700_000_000
    headers = signed_headers(body, SECRET, msg_id="msg_window", timestamp=sent)
    at = datetime.fromtimestamp(sent, tz=UTC)
    for offset in (-60, 0, 60):
        verify(headers, body, now=at + timedelta(seconds=offset), tolerance=60)
    with pytest.raises(signing.SignatureRefused, match=r"too old .*60-second tolerance"):
        verify(headers, body, now=at + timedelta(seconds=61), tolerance=60)
    with pytest.raises(signing.SignatureRefused, match=r"in the future .*60-second tolerance"):
        verify(headers, body, now=at - timedelta(seconds=61), tolerance=60)


def test_signed_headers_helper_round_trips():
    body = b'{"hello": "world"}'
    headers = signed_headers(body, SECRET, msg_id="msg_1", timestamp=VECTOR["timestamp"])
    assert headers["webhook-id"] == "msg_1"
    verify(headers, body)


@pytest.mark.django_db
def test_reference_vector_passes_the_endpoints_signature_check():
    """Through receive_event with the vector's clock: past the signature, stopped by the fields."""
    from intake.services import receive_event

    body = VECTOR["payload"].encode()
    accepted = receive_event("website", vector_headers(), body, now=VECTOR_TIME)
    assert accepted.status == 422
    assert "test" in accepted.body_dict["errors"]  # an unknown field, named
    tampered = receive_event("website", vector_headers(), body + b" ", now=VECTOR_TIME)
    assert tampered.status == 401
    stale = receive_event("website", vector_headers(), body)  # today's clock
    assert stale.status == 401
