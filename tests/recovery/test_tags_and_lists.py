"""Template filters, the enquiry search and the review list."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from recovery import timefmt
from recovery.templatetags import console


@pytest.mark.parametrize(
    "delta,text",
    [
        (timedelta(seconds=20), "under a minute"),
        (timedelta(minutes=7), "7 min"),
        (timedelta(hours=3, minutes=12), "3 h 12 min"),
        (timedelta(hours=5), "5 h"),
        (timedelta(days=2, hours=4), "2 d 4 h"),
        (timedelta(days=3), "3 d"),
        (timedelta(seconds=-30), "under a minute"),
    ],
)
def test_short_duration(delta, text):
    assert console.short_duration(delta) == text


def test_ago_and_until():
    now = timezone.now()
    assert console.ago(now) == "just now"
    assert console.ago(now - timedelta(hours=2, minutes=1)) == "2 h 1 min ago"
    assert console.until(now + timedelta(hours=1, minutes=30)).startswith("in 1 h 29")
    assert console.until(now - timedelta(hours=3)) == "3 h ago"
    assert console.age(None) == console.until(None) == ""


def test_words():
    assert console.action_label("crm.create_enquiry") == "Create the enquiry in the CRM"
    assert console.action_label("new.thing") == "new thing"
    assert console.button_label("reconcile") == "Reconcile now"
    assert console.changes_external("retry") and not console.changes_external("reconcile")
    assert console.actor_name("user:alice") == "alice"
    assert console.actor_name("system:worker-1") == "system:worker-1"


def test_enquiry_search_by_reference_and_state(story, client_for):
    wanted = story.enquiry("needs_information")
    story.enquiry("ready_for_review")
    client = client_for("coordinator")
    response = client.get(reverse("recovery:enquiries") + f"?q={wanted.reference.lower()}")
    assert [e.reference for e in response.context["enquiries"]] == [wanted.reference]
    response = client.get(reverse("recovery:enquiries") + "?state=needs_information")
    assert [e.reference for e in response.context["enquiries"]] == [wanted.reference]
    assert response.context["count"] == 1


def test_review_list_oldest_first_with_matches_and_unresolved_filter(story, client_for):
    first = story.enquiry("ready_for_review", email="same@example.org")
    second = story.enquiry("ready_for_review", email="same@example.org", category=None)
    story.enquiry("needs_information")
    type(first).objects.filter(pk=first.pk).update(
        state_changed_at=timezone.now() - timedelta(hours=2)
    )
    client = client_for("reviewer")
    response = client.get(reverse("recovery:review"))
    listed = response.context["enquiries"]
    assert [e.reference for e in listed] == [first.reference, second.reference]
    assert [e.earlier for e in listed] == [0, 1]  # advisory: one earlier from the same address
    response = client.get(reverse("recovery:review") + "?unresolved=1")
    assert [e.reference for e in response.context["enquiries"]] == [second.reference]
    page = client.get(reverse("recovery:review-item", args=[second.reference])).content.decode()
    assert first.reference in page and "advisory" in page


def test_one_time_format_local_24_hour_with_zone(settings):
    settings.TIME_ZONE = "Europe/London"
    winter = datetime(2026, 12, 1, 14, 12, tzinfo=UTC)
    summer = datetime(2026, 7, 1, 14, 12, tzinfo=UTC)
    assert timefmt.local(winter) == "1 Dec 2026, 14:12 GMT"
    assert timefmt.local(summer) == "1 Jul 2026, 15:12 BST"
    assert timefmt.local(summer, date=False) == "15:12 BST"
    assert timefmt.local(winter, seconds=True) == "1 Dec 2026, 14:12:00 GMT"
    assert timefmt.local("2026-12-01T14:12:00+00:00") == "1 Dec 2026, 14:12 GMT"
    assert timefmt.local(None) == ""
