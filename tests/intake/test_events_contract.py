"""The intake contract's edges decided in docs/intake.md (issue 26, item 10): a declared form
type is a JSON 415 whatever its boundary; JSON nested too deeply is said to be that; a
webhook-id that could never verify is refused as such; the same event re-serialised is the
same event; an address with a non-ASCII local part is an address (RFC 6531)."""

import json
import unicodedata
import uuid

import pytest

from intake.models import Enquiry, EventConflict, IntakeEvent
from tests.intake.conftest import SECRET, URL
from tests.intake.signing import signed_headers

pytestmark = pytest.mark.django_db

VALID = {"email": "ada@example.org", "message": "My bin was not emptied.", "consent": True}
MULTIPART = b'--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\nb\r\n--xyz--\r\n'


def post(client, body: bytes, *, content_type="application/json", msg_id=None):
    return client.generic(
        "POST", URL, body, content_type=content_type, headers=signed_headers(body, SECRET, msg_id)
    )


@pytest.mark.parametrize(
    "content_type",
    [
        "multipart/form-data",  # no boundary: Django's form parser answered an HTML 400
        "multipart/form-data; boundary=xyz",  # parsed as a form, the body was gone: 401
        "application/x-www-form-urlencoded",
        "text/plain",
    ],
)
@pytest.mark.parametrize("signed", [True, False])
def test_a_body_declared_as_anything_but_json_is_a_json_415(client, content_type, signed):
    headers = signed_headers(MULTIPART, SECRET) if signed else {}
    response = client.generic("POST", URL, MULTIPART, content_type=content_type, headers=headers)
    assert response.status_code == 415
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"error": "Send the body as application/json."}
    assert not IntakeEvent.objects.exists()


@pytest.mark.parametrize("depth", [40, 1000])
def test_json_nested_too_deeply_is_said_to_be_that(client, depth):
    body = (json.dumps(VALID)[:-1] + ', "documents": ' + "[" * depth + "]" * depth + "}").encode()
    response = post(client, body)
    assert response.status_code == 422
    assert "nested too deeply" in response.json()["errors"]["body"][0]
    assert not IntakeEvent.objects.exists()


def test_the_contracts_own_depth_is_accepted(client):
    body = json.dumps({**VALID, "documents": [{"id": "doc-1", "version": "2"}]}).encode()
    assert post(client, body).status_code == 202


@pytest.mark.parametrize("msg_id", ["msg_é", "msg_\u2603", "msg tab\there", ""])
def test_a_webhook_id_that_could_never_verify_is_refused_clearly(client, msg_id):
    body = json.dumps(VALID).encode()
    headers = signed_headers(body, SECRET, msg_id or "x")
    headers["webhook-id"] = msg_id  # signed_headers makes an id of its own for ""
    response = client.generic("POST", URL, body, content_type="application/json", headers=headers)
    assert response.status_code == 401
    assert "webhook-id must be printable ASCII" in response.json()["error"]
    assert not IntakeEvent.objects.exists()


def _nfd(value):
    if isinstance(value, str):
        return unicodedata.normalize("NFD", value)
    if isinstance(value, dict):
        return {_nfd(k): _nfd(v) for k, v in reversed(value.items())}
    if isinstance(value, list):
        return [_nfd(v) for v in value]
    return value


SAME_EVENT = {
    "name": "Zoë Brontë",
    "email": "zoe@example.org",
    "message": "Café closed, bins overflowing. Ça déborde.",
    "documents": [{"id": "doc-1", "version": "2"}],
    "consent": True,
}


@pytest.mark.parametrize(
    "again",
    [
        lambda p: json.dumps(dict(reversed(p.items()))).encode(),  # key order
        lambda p: json.dumps(p, indent=2).encode(),  # whitespace
        lambda p: json.dumps(p, ensure_ascii=False).encode(),  # raw UTF-8 against \\u escapes
        lambda p: json.dumps(_nfd(p)).encode(),  # NFD against NFC, key order too
    ],
    ids=["key-order", "whitespace", "escapes", "nfd"],
)
def test_the_same_event_reserialised_is_the_same_event(client, again):
    msg_id = f"msg_{uuid.uuid4().hex}"
    first = post(client, json.dumps(SAME_EVENT).encode(), msg_id=msg_id)
    assert first.status_code == 202
    second = post(client, again(SAME_EVENT), msg_id=msg_id)
    assert second.status_code == 200, second.content
    assert second.json() == {**first.json(), "duplicate": True}
    assert Enquiry.objects.count() == 1 and not EventConflict.objects.exists()
    assert IntakeEvent.objects.get().deliveries == 2


@pytest.mark.parametrize(
    "changed",
    [
        {"message": "Café closed, bins overflowing. Ça déborde!"},
        {"consent": 1},  # true is not 1
        {"documents": [{"id": "doc-1", "version": "3"}]},
    ],
)
def test_a_changed_event_under_the_same_id_is_still_a_conflict(client, changed):
    msg_id = f"msg_{uuid.uuid4().hex}"
    assert post(client, json.dumps(SAME_EVENT).encode(), msg_id=msg_id).status_code == 202
    response = post(client, json.dumps({**SAME_EVENT, **changed}).encode(), msg_id=msg_id)
    assert response.status_code == 409
    assert EventConflict.objects.count() == 1


@pytest.mark.parametrize(
    ("email", "stored"),
    [
        ("josé@example.org", "josé@example.org"),
        ("jose\u0301@example.org", "josé@example.org"),  # NFD typed: stored NFC
        ("用户@例子.广告", "用户@例子.广告"),
        ("Ünïcode.Name@Example.org", "ünïcode.name@example.org"),
    ],
)
def test_an_address_with_a_non_ascii_local_part_is_accepted(client, email, stored):
    response = post(client, json.dumps({**VALID, "email": email}).encode())
    assert response.status_code == 202, response.content
    assert Enquiry.objects.get().email == stored


@pytest.mark.parametrize(
    "email",
    ["jo\u200bse@example.org", "jo\u00a0se@example.org", "jo\u202ese@example.org", "é@", "@é"],
)
def test_an_address_with_invisible_or_missing_parts_is_refused(client, email):
    response = post(client, json.dumps({**VALID, "email": email}).encode())
    assert response.status_code == 422
    assert "email" in response.json()["errors"]
