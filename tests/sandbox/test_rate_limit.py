"""The sandbox's rate limit (429 + Retry-After above N calls a second) and its per-second
counts: what the limits in Handover are measured against."""

import pytest

from sandbox.store.control import _max_in_window

pytestmark = pytest.mark.slow  # every test starts a real sandbox process

ENQUIRY = {"reference": "R-RATE"}


def test_the_most_in_any_window_is_counted_over_sliding_windows():
    assert _max_in_window([]) == 0
    assert _max_in_window([0.0, 0.5, 0.99, 1.0, 1.5]) == 3  # [0, 1) and [0.5, 1.5)
    assert _max_in_window([0.9, 1.1]) == 2  # two calendar seconds, one window
    assert _max_in_window([0.0, 1.0, 2.0]) == 1  # a window is half-open


def test_an_error_429_fault_names_its_wait_and_writes_nothing(api, sandbox):
    sandbox.fault("crm.create", "error_429", delay_ms=3000)
    refused = api.post("/crm/enquiries", json=ENQUIRY)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "3"
    assert refused.json()["error"] == "too_many_requests"
    assert sandbox.stats()["crm"]["total"] == 0
    assert api.post("/crm/enquiries", json=ENQUIRY).status_code == 201


def test_calls_over_the_global_limit_get_429_with_retry_after(api, sandbox):
    sandbox.capabilities(rate_limit_per_second=1)
    answers = []
    # Back to back, the second call of a pair lands within the first's second; a pair that
    # does not (a very slow machine) is simply followed by another.
    for _ in range(20):
        answers.append(api.post("/crm/enquiries", json=ENQUIRY))
        answers.append(api.get("/appointments", params={"date": "2030-01-01"}))
        if answers[-1].status_code == 429:
            break
    refused = [r for r in answers if r.status_code == 429]
    assert refused, "no call was refused"
    for response in refused:
        assert int(response.headers["Retry-After"]) >= 1
        assert response.json()["error"] == "too_many_requests"
    stats = sandbox.stats()
    created = sum(1 for r in answers if r.status_code == 201)
    assert stats["crm"]["total"] == created  # a refused create wrote nothing
    assert stats["rate_limited"]["all"] == len(refused)
    assert stats["max_in_any_second"]["all"] >= 2
    assert sum(stats["per_second"]["all"].values()) == len(answers)
    assert sum(stats["per_second"]["crm.create"].values()) == stats["requests"]["crm.create"]


def test_a_per_target_limit_counts_each_target_on_its_own(api, sandbox):
    sandbox.capabilities(rate_limit_per_second=1, rate_limit_scope="target")
    assert api.post("/crm/enquiries", json=ENQUIRY).status_code == 201
    # Another target's first call in this second: its own count, let in whatever the timing.
    assert api.get("/appointments", params={"date": "2030-01-01"}).status_code == 200
    assert "all" not in sandbox.stats()["rate_limited"]


@pytest.mark.parametrize(
    "changes",
    [
        {"rate_limit_per_second": -1},
        {"rate_limit_per_second": "40"},
        {"rate_limit_per_second": True},
        {"rate_limit_scope": "everything"},
    ],
)
def test_bad_rate_limit_capabilities_are_refused(api, sandbox, changes):
    response = api.post("/_sandbox/capabilities", json=changes)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_capability"
