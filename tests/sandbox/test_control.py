"""The control plane, token auth, routing errors and durability across restarts."""

import pytest
import requests

from harness.sandbox_process import SandboxProcess

pytestmark = pytest.mark.slow  # every test starts a real sandbox process

DEFAULT_CAPABILITIES = {
    "lookup": True,
    "idempotency_key": True,
    "lookup_lag_seconds": 0,
    "delivery_delay_ms": 200,
    "rate_limit_per_second": 0,
    "rate_limit_scope": "global",
}


def test_fresh_stats(sandbox):
    assert sandbox.stats() == {
        "crm": {"total": 0, "open": 0, "closed": 0, "by_reference": {}},
        "notify": {"total": 0, "by_reference": {}},
        "docs": {"total": 0, "versions": 0},
        "requests": {},
        "paths": {},
        "faults_fired": {},
        "faults_pending": [],
        "per_second": {"all": {}},
        "max_in_any_second": {"all": 0},
        "rate_limited": {},
        "capabilities": DEFAULT_CAPABILITIES,
    }


def test_stats_count_requests_per_target_but_not_control_calls(api, sandbox):
    api.post("/crm/enquiries", json={"reference": "R-1"})
    api.get("/crm/enquiries", params={"reference": "R-1"})
    api.get("/appointments", params={"date": "2030-01-01"})
    api.get("/appointments", params={"date": "bad"})  # a rejected call still counts
    sandbox.stats()
    assert sandbox.stats()["requests"] == {
        "appointments.list": 2,
        "crm.create": 1,
        "crm.lookup": 1,
    }


def test_stats_count_requests_per_path_as_sent_routed_or_not(api, sandbox):
    api.get("/docs/a%2Fb", params={"version": "1"})  # encoded: one segment, no route for it
    api.get("/docs/a%2Fb")
    api.get("/crm/enquiries", params={"reference": "R-1"})
    api.get("/nowhere")
    sandbox.stats()  # control calls are not counted
    assert sandbox.stats()["paths"] == {
        "GET /crm/enquiries": 1,
        "GET /docs/a%2Fb": 2,
        "GET /nowhere": 1,
    }


def test_reset_wipes_records_faults_counters_and_capabilities(api, sandbox):
    api.post("/crm/enquiries", json={"reference": "R-1"})
    api.post("/notify/messages", json={"to": "a@example.org", "template": "t", "reference": "R"})
    api.put("/docs/d", data="x")
    sandbox.set_doc_access("d", False)
    sandbox.fault("crm.get", "error_503")
    sandbox.fault("crm.create", "error_503")
    api.post("/crm/enquiries", json={"reference": "R-2"})
    sandbox.capabilities(lookup=False, lookup_lag_seconds=5)

    after = sandbox.reset()
    assert after["crm"]["total"] == after["notify"]["total"] == after["docs"]["total"] == 0
    assert after["requests"] == after["paths"] == after["faults_fired"] == {}
    assert after["faults_pending"] == []
    assert after["capabilities"] == DEFAULT_CAPABILITIES
    api.put("/docs/d", data="y")
    assert api.get("/docs/d").status_code == 200  # access restored too


def test_capabilities_read_change_and_validate(api, sandbox):
    assert sandbox.capabilities() == DEFAULT_CAPABILITIES
    changed = sandbox.capabilities(lookup_lag_seconds=1.5, delivery_delay_ms=10)
    assert changed == {**DEFAULT_CAPABILITIES, "lookup_lag_seconds": 1.5, "delivery_delay_ms": 10}
    for bad in ({"teleport": True}, {"lookup": "yes"}, {"lookup_lag_seconds": -1}):
        response = api.post("/_sandbox/capabilities", json=bad)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_capability"
    assert sandbox.stats()["capabilities"] == changed


def test_routing_errors_are_json(api):
    unknown = api.get("/crm/nothing/here")
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "not_found"

    wrong_method = api.delete("/crm/enquiries")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"] == "method_not_allowed"
    assert wrong_method.headers["Allow"] == "GET, POST"

    malformed = api.post("/_sandbox/faults", data="nope")
    assert malformed.status_code == 400
    assert malformed.json()["error"] == "malformed_json"
    assert malformed.headers["Content-Type"] == "application/json"


def test_token_protects_service_calls_but_not_control(tmp_path):
    with SandboxProcess() as sandbox:
        sandbox.start(tmp_path / "sandbox.sqlite3", token="s3cret")
        url = f"{sandbox.url}/crm/enquiries"

        missing = requests.post(url, json={"reference": "R-1"}, timeout=5)
        assert missing.status_code == 401
        assert missing.json()["error"] == "unauthorized"
        wrong = requests.post(
            url, json={"reference": "R-1"}, headers={"Authorization": "Bearer nope"}, timeout=5
        )
        assert wrong.status_code == 401
        slots = requests.get(f"{sandbox.url}/appointments?date=2030-01-01", timeout=5)
        assert slots.status_code == 401
        assert sandbox.stats()["crm"]["total"] == 0  # control calls need no token

        allowed = requests.post(
            url, json={"reference": "R-1"}, headers=sandbox.auth_headers, timeout=5
        )
        assert allowed.status_code == 201
        assert sandbox.stats()["crm"]["total"] == 1


def test_records_survive_a_restart_in_the_middle(api, sandbox):
    first = api.post("/crm/enquiries", json={"reference": "R-1"}).json()["id"]
    api.put("/docs/d", data="v1")
    old_pid = sandbox.pid

    sandbox.restart()
    assert sandbox.pid != old_pid
    second = api.post("/crm/enquiries", json={"reference": "R-2"}).json()["id"]

    assert api.get(f"/crm/enquiries/{first}").status_code == 200
    assert api.get(f"/crm/enquiries/{second}").status_code == 200
    assert api.put("/docs/d", data="v2").json()["version"] == 2
    assert sandbox.stats()["crm"]["by_reference"] == {"R-1": 1, "R-2": 1}


def test_everything_answered_survives_a_kill(api, sandbox):
    # Each answered write was committed before its answer, so SIGKILL loses none of them.
    headers = {"Idempotency-Key": "before-kill"}
    created = api.post("/crm/enquiries", json={"reference": "R-1"}, headers=headers).json()
    sandbox.capabilities(lookup_lag_seconds=0.5)

    sandbox.kill()
    assert not sandbox.running
    sandbox.restart()

    replay = api.post("/crm/enquiries", json={"reference": "R-1"}, headers=headers)
    assert replay.status_code == 200
    assert replay.json() == created
    stats = sandbox.stats()
    assert stats["crm"]["total"] == 1
    assert stats["capabilities"]["lookup_lag_seconds"] == 0.5
