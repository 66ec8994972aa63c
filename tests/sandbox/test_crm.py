"""The fake CRM: create, get, lookup, close, idempotency and its capabilities."""

import threading

import pytest
import requests

pytestmark = pytest.mark.slow  # every test starts a real sandbox process


def test_create_then_get_lookup_and_close(api, sandbox):
    created = api.post("/crm/enquiries", json={"reference": "R-1", "name": "Ada", "phone": "1"})
    assert created.status_code == 201
    record = created.json()
    assert record["id"].startswith("crm_")
    assert record["reference"] == "R-1"
    assert record["created_at"]

    fetched = api.get(f"/crm/enquiries/{record['id']}")
    assert fetched.status_code == 200
    assert fetched.json()["data"] == {"reference": "R-1", "name": "Ada", "phone": "1"}
    assert fetched.json()["closed"] is False

    found = api.get("/crm/enquiries", params={"reference": "R-1"})
    assert found.status_code == 200
    assert [r["id"] for r in found.json()["results"]] == [record["id"]]
    assert api.get("/crm/enquiries", params={"reference": "other"}).json() == {"results": []}

    closed = api.post(f"/crm/enquiries/{record['id']}/close", json={"reason": "duplicate"})
    assert closed.status_code == 200
    assert closed.json()["closed"] is True
    assert closed.json()["close_reason"] == "duplicate"
    assert closed.json()["closed_at"]

    crm = sandbox.stats()["crm"]
    assert crm == {"total": 1, "open": 0, "closed": 1, "by_reference": {"R-1": 1}}


def test_close_twice_returns_the_same_record_and_never_deletes(api, sandbox):
    record_id = api.post("/crm/enquiries", json={"reference": "R-2"}).json()["id"]
    first = api.post(f"/crm/enquiries/{record_id}/close", json={"reason": "first"})
    second = api.post(f"/crm/enquiries/{record_id}/close", json={"reason": "second"})
    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    assert second.json()["close_reason"] == "first"
    # A closed record is still there and still found.
    assert api.get(f"/crm/enquiries/{record_id}").json()["closed"] is True
    assert len(api.get("/crm/enquiries", params={"reference": "R-2"}).json()["results"]) == 1
    assert sandbox.stats()["crm"]["total"] == 1


def test_close_accepts_an_empty_body(api):
    record_id = api.post("/crm/enquiries", json={"reference": "R-3"}).json()["id"]
    closed = api.post(f"/crm/enquiries/{record_id}/close")
    assert closed.status_code == 200
    assert closed.json()["close_reason"] is None


def test_unknown_enquiry_is_404(api):
    assert api.get("/crm/enquiries/crm_missing").json()["error"] == "not_found"
    assert api.get("/crm/enquiries/crm_missing").status_code == 404
    assert api.post("/crm/enquiries/crm_missing/close", json={"reason": "x"}).status_code == 404


def test_create_validates_its_body(api, sandbox):
    missing = api.post("/crm/enquiries", json={"name": "no reference"})
    assert missing.status_code == 400
    assert missing.json()["error"] == "invalid_request"
    assert api.post("/crm/enquiries", json={"reference": 12}).status_code == 400
    assert api.post("/crm/enquiries", json=["reference"]).status_code == 400

    malformed = api.post(
        "/crm/enquiries", data="{not json", headers={"Content-Type": "application/json"}
    )
    assert malformed.status_code == 400
    assert malformed.json()["error"] == "malformed_json"
    assert malformed.json()["detail"]
    assert sandbox.stats()["crm"]["total"] == 0


def test_repeated_idempotency_key_replays_the_first_response(api, sandbox):
    headers = {"Idempotency-Key": "key-1"}
    body = {"reference": "R-4", "name": "Ada"}
    first = api.post("/crm/enquiries", json=body, headers=headers)
    # Same body with keys in another order: still the same request.
    again = api.post("/crm/enquiries", json={"name": "Ada", "reference": "R-4"}, headers=headers)
    assert first.status_code == 201
    assert again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert sandbox.stats()["crm"]["total"] == 1


def test_idempotency_key_with_another_body_is_422(api, sandbox):
    headers = {"Idempotency-Key": "key-2"}
    assert api.post("/crm/enquiries", json={"reference": "R-5"}, headers=headers).ok
    conflict = api.post("/crm/enquiries", json={"reference": "R-6"}, headers=headers)
    assert conflict.status_code == 422
    assert conflict.json()["error"] == "idempotency_error"
    assert sandbox.stats()["crm"]["by_reference"] == {"R-5": 1}


def test_without_idempotency_capability_a_blind_repeat_duplicates(api, sandbox):
    caps = sandbox.capabilities(idempotency_key=False)
    assert caps["idempotency_key"] is False
    headers = {"Idempotency-Key": "key-3"}
    first = api.post("/crm/enquiries", json={"reference": "R-7"}, headers=headers)
    second = api.post("/crm/enquiries", json={"reference": "R-7"}, headers=headers)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]
    assert sandbox.stats()["crm"]["by_reference"] == {"R-7": 2}


def test_lookup_unsupported_when_capability_is_off(api, sandbox):
    api.post("/crm/enquiries", json={"reference": "R-8"})
    sandbox.capabilities(lookup=False)
    response = api.get("/crm/enquiries", params={"reference": "R-8"})
    assert response.status_code == 501
    assert response.json()["error"] == "lookup_unsupported"
    sandbox.capabilities(lookup=True)
    assert len(api.get("/crm/enquiries", params={"reference": "R-8"}).json()["results"]) == 1


def test_lookup_lag_hides_young_records(api, sandbox):
    sandbox.capabilities(lookup_lag_seconds=3600)
    record_id = api.post("/crm/enquiries", json={"reference": "R-9"}).json()["id"]
    assert api.get("/crm/enquiries", params={"reference": "R-9"}).json()["results"] == []
    # The record exists all the same: by id and in the store.
    assert api.get(f"/crm/enquiries/{record_id}").status_code == 200
    assert sandbox.stats()["crm"]["total"] == 1
    sandbox.capabilities(lookup_lag_seconds=0)
    results = api.get("/crm/enquiries", params={"reference": "R-9"}).json()["results"]
    assert [r["id"] for r in results] == [record_id]


def test_lookup_needs_a_reference(api):
    response = api.get("/crm/enquiries")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"


def _create_concurrently(sandbox, count, headers_for):
    """POST ``count`` creates at once from separate threads; returns the responses' (status, id)."""
    barrier = threading.Barrier(count)
    outcomes = [None] * count

    def create(index):
        barrier.wait()
        response = requests.post(
            f"{sandbox.url}/crm/enquiries",
            json={"reference": "R-C"},
            headers=headers_for(index),
            timeout=30,
        )
        outcomes[index] = (response.status_code, response.json()["id"])

    threads = [threading.Thread(target=create, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_twenty_concurrent_creates_with_one_key_make_one_record(sandbox):
    outcomes = _create_concurrently(sandbox, 20, lambda i: {"Idempotency-Key": "same"})
    statuses = sorted(status for status, _ in outcomes)
    assert statuses == [200] * 19 + [201]
    assert len({record_id for _, record_id in outcomes}) == 1
    stats = sandbox.stats()
    assert stats["crm"]["total"] == 1
    assert stats["requests"]["crm.create"] == 20


def test_twenty_concurrent_creates_with_distinct_keys_are_all_kept(sandbox):
    outcomes = _create_concurrently(sandbox, 20, lambda i: {"Idempotency-Key": f"k{i}"})
    assert [status for status, _ in outcomes] == [201] * 20
    assert len({record_id for _, record_id in outcomes}) == 20
    assert sandbox.stats()["crm"]["by_reference"] == {"R-C": 20}
