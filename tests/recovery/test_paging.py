"""Paging and filters in the address: a page past the end, a page that is not a number and a
filter value that names nothing are each said on the page, never silently "page 1" or "all";
the pager keeps every other filter."""

import pytest
from django.http import QueryDict
from django.urls import reverse

from recovery.views import queue as views
from recovery.views.common import int_param


@pytest.mark.parametrize(
    "value,expected",
    [
        ("12", 12),
        (" 3 ", 3),
        ("0", 0),
        ("", None),
        ("²", None),
        ("٣", None),
        ("-1", None),
        ("1e3", None),
        ("3.0", None),
        ("9" * 10, None),
        ("abc", None),
    ],
)
def test_int_param_reads_ascii_digits_only(value, expected):
    assert int_param(QueryDict(mutable=True) | {"page": value}, "page") == expected


def test_int_param_absent_is_none():
    assert int_param(QueryDict(), "page") is None


@pytest.fixture
def five_enquiries(story, monkeypatch):
    monkeypatch.setattr(views, "SEARCH_PAGE_SIZE", 2)
    monkeypatch.setattr(views, "REVIEW_PAGE_SIZE", 2)
    return [story.enquiry("ready_for_review", category=None) for _ in range(5)]


def test_enquiry_search_page_past_the_end_shows_the_last_page_and_says_so(
    five_enquiries, client_for
):
    response = client_for("coordinator").get(reverse("recovery:enquiries") + "?page=9")
    assert response.status_code == 200
    assert response.context["page"].number == 3
    assert len(response.context["enquiries"]) == 1
    assert "There is no page 9: showing the last page (3)." in response.content.decode()


@pytest.mark.parametrize("page", ["²", "abc", "0", "-1", "99999999999999", "1e3"])
def test_odd_page_values_are_never_an_error(five_enquiries, client_for, page):
    client = client_for("reviewer")
    for name in ("recovery:enquiries", "recovery:review", "recovery:queue"):
        response = client.get(reverse(name), {"page": page})
        assert response.status_code == 200, (name, page)
        assert "not understood; showing page 1" in response.content.decode()


def test_unknown_state_is_said_not_silently_all(five_enquiries, client_for):
    client = client_for("coordinator")
    html = client.get(reverse("recovery:enquiries"), {"state": "<b>x</b>"}).content.decode()
    assert "state “&lt;b&gt;x&lt;/b&gt;” not understood; showing all." in html
    html = client.get(reverse("recovery:queue"), {"state": "bogus"}).content.decode()
    assert "state “bogus” not understood; showing all queues." in html
    html = client.get(reverse("recovery:queue"), {"integration": "fax"}).content.decode()
    assert "integration “fax” not understood; showing every system." in html
    html = client.get(reverse("recovery:queue"), {"owner": "²"}).content.decode()
    assert "owner “²” not understood; showing anyone." in html
    html = client_for("reviewer").get(reverse("recovery:review"), {"unresolved": "yes"})
    assert "unresolved “yes” not understood; showing all." in html.content.decode()


def test_known_values_get_no_note(five_enquiries, client_for):
    response = client_for("coordinator").get(
        reverse("recovery:enquiries"), {"state": "ready_for_review", "page": "2"}
    )
    assert response.context["notes"] == []
    assert len(response.context["enquiries"]) == 2


def test_review_queue_next_link_keeps_unresolved(five_enquiries, client_for):
    html = client_for("reviewer").get(reverse("recovery:review") + "?unresolved=1").content
    html = html.decode()
    assert 'href="?unresolved=1&amp;page=2"' in html
    second = client_for("reviewer").get(reverse("recovery:review") + "?unresolved=1&page=2")
    assert 'href="?unresolved=1&amp;page=1"' in second.content.decode()
    assert 'href="?unresolved=1&amp;page=3"' in second.content.decode()


def test_enquiry_search_next_link_keeps_the_query_and_state(five_enquiries, client_for):
    html = client_for("coordinator").get(
        reverse("recovery:enquiries"), {"state": "ready_for_review"}
    )
    assert 'href="?state=ready_for_review&amp;page=2"' in html.content.decode()


def test_queue_page_past_the_end_says_so(story, client_for):
    story.operation("unknown")
    html = client_for("coordinator").get(reverse("recovery:queue") + "?page=40").content
    assert "There is no page 40: showing the last page (1)." in html.decode()
