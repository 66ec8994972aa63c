"""The fake appointments service: slots for a day, with freshness metadata."""

import pytest

pytestmark = pytest.mark.slow  # every test starts a real sandbox process


def test_slots_for_a_day(api):
    response = api.get("/appointments", params={"date": "2030-03-04"})
    assert response.status_code == 200
    body = response.json()
    assert body["date"] == "2030-03-04"
    assert body["max_age_seconds"] == 300
    assert body["as_of"]
    assert body["slots"]
    for slot in body["slots"]:
        assert set(slot) == {"start", "end", "available"}
        assert slot["start"].startswith("2030-03-04T")
        assert slot["start"] < slot["end"]
        assert isinstance(slot["available"], bool)
    # Same day, same slots: tests can rely on them.
    assert api.get("/appointments", params={"date": "2030-03-04"}).json()["slots"] == body["slots"]


@pytest.mark.parametrize("query", [{}, {"date": "tomorrow"}, {"date": "2030-02-30"}])
def test_bad_date_is_400(api, query):
    response = api.get("/appointments", params=query)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_date"
