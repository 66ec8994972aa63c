"""The fake notification provider: accept, deliver or fail, idempotency, lookup by reference."""

import pytest

pytestmark = pytest.mark.slow  # every test starts a real sandbox process

MESSAGE = {"to": "ada@example.org", "template": "received", "reference": "R-1", "body": "Hi"}


def test_send_is_accepted_and_stays_accepted_until_the_delay_passes(api, sandbox):
    sandbox.capabilities(delivery_delay_ms=3_600_000)
    sent = api.post("/notify/messages", json=MESSAGE)
    assert sent.status_code == 202
    assert sent.json()["status"] == "accepted"
    assert sent.json()["id"].startswith("msg_")

    status = api.get(f"/notify/messages/{sent.json()['id']}").json()
    assert status["id"] == sent.json()["id"]
    assert status["reference"] == "R-1"
    assert status["status"] == "accepted"
    assert sandbox.stats()["notify"] == {"total": 1, "by_reference": {"R-1": 1}}


def test_message_is_delivered_after_the_delay(api, sandbox, poll):
    sandbox.capabilities(delivery_delay_ms=50)
    message_id = api.post("/notify/messages", json=MESSAGE).json()["id"]
    poll(lambda: api.get(f"/notify/messages/{message_id}").json()["status"] == "delivered")


def test_deliver_fault_fails_the_next_message_only(api, sandbox, poll):
    sandbox.capabilities(delivery_delay_ms=50)
    sandbox.fault("notify.deliver", "fail")
    failing = api.post("/notify/messages", json=MESSAGE).json()["id"]
    healthy = api.post("/notify/messages", json={**MESSAGE, "reference": "R-2"}).json()["id"]
    poll(lambda: api.get(f"/notify/messages/{failing}").json()["status"] == "failed")
    poll(lambda: api.get(f"/notify/messages/{healthy}").json()["status"] == "delivered")
    stats = sandbox.stats()
    assert stats["faults_fired"]["notify.deliver"] == {"fail": 1}
    assert stats["faults_pending"] == []


def test_a_replayed_send_does_not_consume_a_deliver_fault(api, sandbox):
    headers = {"Idempotency-Key": "n-1"}
    api.post("/notify/messages", json=MESSAGE, headers=headers)
    sandbox.fault("notify.deliver", "fail")
    replay = api.post("/notify/messages", json=MESSAGE, headers=headers)
    assert replay.status_code == 200
    assert sandbox.stats()["faults_pending"][0]["target"] == "notify.deliver"


def test_idempotency_key_replays_and_rejects_another_body(api, sandbox):
    headers = {"Idempotency-Key": "n-2"}
    first = api.post("/notify/messages", json=MESSAGE, headers=headers)
    again = api.post("/notify/messages", json=MESSAGE, headers=headers)
    other = api.post("/notify/messages", json={**MESSAGE, "body": "changed"}, headers=headers)
    assert first.status_code == 202
    assert again.status_code == 200
    assert again.json() == first.json()
    assert other.status_code == 422
    assert other.json()["error"] == "idempotency_error"
    assert sandbox.stats()["notify"]["total"] == 1


def test_without_idempotency_capability_a_repeat_sends_twice(api, sandbox):
    sandbox.capabilities(idempotency_key=False)
    headers = {"Idempotency-Key": "n-3"}
    first = api.post("/notify/messages", json=MESSAGE, headers=headers)
    second = api.post("/notify/messages", json=MESSAGE, headers=headers)
    assert first.status_code == second.status_code == 202
    assert sandbox.stats()["notify"]["total"] == 2


def test_list_by_reference(api):
    ids = [api.post("/notify/messages", json=MESSAGE).json()["id"] for _ in range(2)]
    api.post("/notify/messages", json={**MESSAGE, "reference": "R-other"})
    listed = api.get("/notify/messages", params={"reference": "R-1"})
    assert listed.status_code == 200
    assert sorted(m["id"] for m in listed.json()["results"]) == sorted(ids)
    assert {m["reference"] for m in listed.json()["results"]} == {"R-1"}
    assert api.get("/notify/messages").status_code == 400


def test_send_validates_and_unknown_message_is_404(api, sandbox):
    for missing in ("to", "template", "reference"):
        body = {key: value for key, value in MESSAGE.items() if key != missing}
        response = api.post("/notify/messages", json=body)
        assert response.status_code == 400
        assert missing in response.json()["detail"]
    assert api.post("/notify/messages", json={**MESSAGE, "body": 5}).status_code == 400
    assert api.get("/notify/messages/msg_missing").status_code == 404
    assert sandbox.stats()["notify"]["total"] == 0
