"""The bulk form refused as a whole (422): the page offers again only what this person may do."""

import re

from django.urls import reverse


def offered(response) -> list[str]:
    select = re.search(r'<select id="b-action".*?</select>', response.content.decode(), re.S)[0]
    return [v for v in re.findall(r'<option value="([^"]*)"', select) if v]


def test_an_empty_bulk_submit_offers_a_coordinator_only_what_they_may_do(client_for):
    response = client_for("coordinator").post(reverse("recovery:bulk"), {"reason": ""})
    assert response.status_code == 422
    assert offered(response) == ["reconcile", "cancel", "reassign"]
    response = client_for("admin").post(reverse("recovery:bulk"), {"reason": ""})
    assert offered(response) == ["reconcile", "retry", "cancel", "reassign"]


def test_a_refused_bulk_submit_offers_what_may_be_done_to_the_items_ticked(story, client_for):
    op = story.operation("unknown", attention="lookup_failed")
    response = client_for("coordinator").post(
        reverse("recovery:bulk"), {"item": f"operation:{op.pk}", "reason": "why"}
    )
    assert response.status_code == 422
    assert "retry" not in offered(response)
    assert "reconcile" in offered(response)
