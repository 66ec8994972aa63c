"""Fault injection: every mode, stacking order, counts, clearing and validation."""

import pytest
import requests

pytestmark = pytest.mark.slow  # every test starts a real sandbox process

ENQUIRY = {"reference": "R-F"}


def test_timeout_after_commit_times_the_client_out_yet_the_record_exists(sandbox):
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=1500)
    with pytest.raises(requests.Timeout):
        requests.post(f"{sandbox.url}/crm/enquiries", json=ENQUIRY, timeout=1)

    found = requests.get(f"{sandbox.url}/crm/enquiries", params={"reference": "R-F"}, timeout=5)
    assert len(found.json()["results"]) == 1
    stats = sandbox.stats()
    assert stats["crm"]["total"] == 1
    assert stats["faults_fired"] == {"crm.create": {"timeout_after_commit": 1}}


def test_timeout_after_commit_answers_a_patient_client_normally(api):
    fault = {"target": "crm.create", "mode": "timeout_after_commit", "delay_ms": 200}
    assert api.post("/_sandbox/faults", json=fault).status_code == 201
    created = api.post("/crm/enquiries", json=ENQUIRY)
    assert created.status_code == 201
    assert created.json()["reference"] == "R-F"


def test_reset_before_commit_drops_the_connection_and_writes_nothing(sandbox):
    sandbox.fault("crm.create", "reset_before_commit")
    with pytest.raises(requests.ConnectionError):
        requests.post(f"{sandbox.url}/crm/enquiries", json=ENQUIRY, timeout=5)
    stats = sandbox.stats()
    assert stats["crm"]["total"] == 0
    assert stats["faults_fired"] == {"crm.create": {"reset_before_commit": 1}}
    # The sandbox itself is fine: the next call goes through.
    created = requests.post(f"{sandbox.url}/crm/enquiries", json=ENQUIRY, timeout=5)
    assert created.status_code == 201


def test_reset_before_commit_with_an_idempotency_key_leaves_the_key_unused(sandbox):
    sandbox.fault("crm.create", "reset_before_commit")
    headers = {"Idempotency-Key": "k-reset"}
    with pytest.raises(requests.ConnectionError):
        requests.post(f"{sandbox.url}/crm/enquiries", json=ENQUIRY, headers=headers, timeout=5)
    retry = requests.post(f"{sandbox.url}/crm/enquiries", json=ENQUIRY, headers=headers, timeout=5)
    assert retry.status_code == 201  # a first create, not a replay
    assert sandbox.stats()["crm"]["total"] == 1


@pytest.mark.parametrize(
    ("mode", "status", "error"),
    [
        ("error_503", 503, "service_unavailable"),
        ("error_401", 401, "unauthorized"),
        ("error_422", 422, "unprocessable_entity"),
    ],
)
def test_error_modes_answer_that_status_and_write_nothing(api, sandbox, mode, status, error):
    sandbox.fault("crm.create", mode)
    response = api.post("/crm/enquiries", json=ENQUIRY)
    assert response.status_code == status
    assert response.json()["error"] == error
    assert sandbox.stats()["crm"]["total"] == 0
    assert api.post("/crm/enquiries", json=ENQUIRY).status_code == 201


def test_latency_delays_then_proceeds_normally(api, sandbox):
    sandbox.fault("crm.create", "latency", delay_ms=100)
    assert api.post("/crm/enquiries", json=ENQUIRY).status_code == 201
    stats = sandbox.stats()
    assert stats["crm"]["total"] == 1
    assert stats["faults_fired"] == {"crm.create": {"latency": 1}}


def test_faults_stack_per_target_and_fire_in_order(api, sandbox):
    sandbox.fault("crm.create", "error_503", count=2)
    sandbox.fault("crm.create", "error_422")
    sandbox.fault("crm.get", "error_401")
    pending = sandbox.stats()["faults_pending"]
    assert [(f["target"], f["mode"], f["remaining"]) for f in pending] == [
        ("crm.create", "error_503", 2),
        ("crm.create", "error_422", 1),
        ("crm.get", "error_401", 1),
    ]

    statuses = [api.post("/crm/enquiries", json=ENQUIRY).status_code for _ in range(4)]
    assert statuses == [503, 503, 422, 201]
    stats = sandbox.stats()
    assert stats["faults_fired"] == {"crm.create": {"error_422": 1, "error_503": 2}}
    assert [f["target"] for f in stats["faults_pending"]] == ["crm.get"]
    assert stats["requests"]["crm.create"] == 4


def test_clear_faults(api, sandbox):
    sandbox.fault("crm.create", "error_503", count=5)
    assert sandbox.clear_faults() == {"faults_pending": []}
    assert api.post("/crm/enquiries", json=ENQUIRY).status_code == 201
    assert sandbox.stats()["faults_fired"] == {}


def _seed(api):
    """One record of each kind so read targets have something to find."""
    record_id = api.post("/crm/enquiries", json=ENQUIRY).json()["id"]
    message_id = api.post(
        "/notify/messages", json={"to": "a@example.org", "template": "t", "reference": "R-F"}
    ).json()["id"]
    api.put("/docs/doc-f", data="text")
    return record_id, message_id


@pytest.mark.parametrize(
    ("target", "method", "path"),
    [
        ("crm.lookup", "GET", "/crm/enquiries?reference=R-F"),
        ("crm.get", "GET", "/crm/enquiries/{record}"),
        ("crm.close", "POST", "/crm/enquiries/{record}/close"),
        ("notify.send", "POST", "/notify/messages"),
        ("notify.status", "GET", "/notify/messages/{message}"),
        ("docs.put", "PUT", "/docs/doc-f"),
        ("docs.get", "GET", "/docs/doc-f"),
        ("appointments.list", "GET", "/appointments?date=2030-01-01"),
    ],
)
def test_every_target_can_be_faulted(api, sandbox, target, method, path):
    record_id, message_id = _seed(api)
    url = path.format(record=record_id, message=message_id)
    body = {"to": "a@example.org", "template": "t", "reference": "R-F"}
    sandbox.fault(target, "error_503")
    before = sandbox.stats()

    faulted = api.request(method, url, json=body)
    assert faulted.status_code == 503
    assert "Retry-After" not in faulted.headers  # an outage, not a request to slow down
    after = sandbox.stats()
    assert after["faults_fired"][target] == {"error_503": 1}
    # A faulted write leaves the store as it was.
    for kind in ("crm", "notify", "docs"):
        assert after[kind] == before[kind]

    sandbox.fault(target, "reset_before_commit")
    with pytest.raises(requests.ConnectionError):
        api.request(method, url, json=body)
    assert api.request(method, url, json=body).status_code < 300


def test_invalid_faults_are_rejected(api, sandbox):
    bad = [
        {"target": "crm.delete", "mode": "error_503"},
        {"target": "crm.create", "mode": "explode"},
        {"target": "crm.create", "mode": "fail"},
        {"target": "notify.deliver", "mode": "error_503"},
        {"target": "crm.create", "mode": "error_503", "count": 0},
        {"target": "crm.create", "mode": "latency", "delay_ms": -1},
        {"target": "crm.create", "mode": "latency", "delay_ms": "soon"},
    ]
    for fault in bad:
        response = api.post("/_sandbox/faults", json=fault)
        assert response.status_code == 400, fault
        assert response.json()["error"] == "invalid_fault"
    assert sandbox.stats()["faults_pending"] == []


def test_pending_faults_survive_a_restart(sandbox):
    sandbox.fault("crm.create", "error_503")
    sandbox.restart()
    assert sandbox.stats()["faults_pending"][0]["mode"] == "error_503"
    response = requests.post(f"{sandbox.url}/crm/enquiries", json=ENQUIRY, timeout=5)
    assert response.status_code == 503
