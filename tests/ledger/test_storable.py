"""What a destination returns is made storable before anything keeps it (ledger.storable), and
a crash inside Handover is an internal error, never the destination's outcome.

A NUL byte in an answer once made Check connection answer 500, and crashed a delivery task, so
that the sweeper later turned the destination's definite 503 into "worker lost, uncertain"."""

import pytest

from ledger import http, storable, tasks
from ledger.connectors.base import CallResult, ConnectorError, ErrorKind
from ledger.models import Attempt, Integration, JournalEntry, OperationState
from tests.ledger.oddserver import OddServer

NUL_JSON = b'{"error": "down\\u0000 for maintenance \\ud800"}'
NUL_TEXT = b"down\x00 for maintenance"


@pytest.mark.parametrize(
    ("value", "clean"),
    [
        ("a\x00b", "a\ufffdb"),
        ("\ud800x", "\ufffdx"),
        ("ok", "ok"),
        (None, ""),
        (7, "7"),
    ],
)
def test_text_is_made_storable(value, clean):
    assert storable.text(value) == clean


@pytest.mark.parametrize(
    "value, kept",
    [
        (250, 250),
        (421, 421),
        (999, 999),
        (100, 100),
        (0, None),
        (-1, None),
        (99, None),
        (1000, None),
        (2**40, None),
        (None, None),
        ("250", None),
        (True, None),
    ],
)
def test_a_status_is_kept_only_as_a_status(value, kept):
    assert storable.status(value) == kept


def test_data_is_made_storable_keys_too():
    assert storable.data({"k\x00": ["\x00", {"x": "\udfff"}], "n": 1}) == {
        "k\ufffd": ["\ufffd", {"x": "\ufffd"}],
        "n": 1,
    }


def test_connector_types_clean_what_they_carry():
    error = ConnectorError("invalid", "400: bad\x00", body="b\x00", evidence={"id": "\x00"})
    assert "\x00" not in error.message + error.body + str(error.evidence)
    result = CallResult(200, "id\x00", "b\x00", {"k": "\x00"})
    assert "\x00" not in result.external_id + result.body + str(result.result)


@pytest.mark.parametrize("body", [NUL_JSON, NUL_TEXT])
def test_the_wrapper_cleans_an_answer_with_a_nul(body):
    with (
        OddServer(503, body, {"Content-Type": "application/json"}) as odd,
        pytest.raises(ConnectorError) as caught,
    ):
        http.send("POST", odd.url + "/crm/enquiries", timeout=2.0, json_body={})
    error = caught.value
    assert (error.kind, error.status) == (ErrorKind.TRANSIENT, 503)
    assert "\x00" not in error.message and "\x00" not in error.body
    assert "down" in error.message


@pytest.mark.parametrize("body", [NUL_JSON, NUL_TEXT])
def test_a_definite_503_with_a_nul_is_recorded_as_a_503(approved_enquiry, integrations, body):
    with OddServer(503, body, {"Content-Type": "application/json"}) as odd:
        Integration.objects.filter(name="crm").update(base_url=odd.url)
        _enquiry, op = approved_enquiry()
        assert tasks.execute_operation(str(op.pk)) == "retry scheduled"
        assert len(odd.requests) == 1
    op.refresh_from_db()
    assert op.state == OperationState.APPROVED and op.last_error_class == "transient"
    assert op.last_error_status == 503
    attempt = Attempt.objects.get(operation=op)
    assert (attempt.outcome, attempt.response_status) == ("transient", 503)
    assert "\x00" not in attempt.response_body and "down" in attempt.response_body
    assert not Attempt.objects.filter(error_class="uncertain").exists()


def test_check_connection_stores_an_answer_with_a_nul(integrations, make_user):
    from ledger.services import check_integration

    with OddServer(418, NUL_TEXT) as odd:
        Integration.objects.filter(name="crm").update(base_url=odd.url)
        problems = check_integration("crm", actor=make_user("admin"))
    assert problems and all("\x00" not in p for p in problems)
    entry = JournalEntry.objects.filter(action="ledger.integration.checked").latest("at")
    assert "\x00" not in str(entry.evidence)
