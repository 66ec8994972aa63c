"""No odd value makes any view answer 5xx: console and admin, in path, query and form.

The URLs come from the project's resolver (every route but the signed intake endpoint, see
tests/security/urlwalk.py) and
from the admin's own links (every change list, change page, add page), so a view added later
is covered without editing this test. Odd values: "²" (which ``str.isdigit()`` accepts and
``int()`` refuses), NUL (which PostgreSQL text cannot hold), numbers past any integer column, a
lone surrogate's UTF-8, an invalid byte, very long values (urlwalk.ODD_VALUES). Each must be
answered 2xx, 3xx or 4xx: refused, ignored or not found. Under CI (the Hypothesis profile
"ci") every odd value goes to every URL; otherwise each URL gets three of them, the choice
moving on from URL to URL so that each value still reaches many (urlwalk.assault).
"""

from django.test import Client

from tests.security.conftest import snapshot
from tests.security.urlwalk import (
    ODD_VALUES,
    admin_urls,
    assault,
    console_routes,
    urls_for,
    walk,
)


def _client(user):
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def _walk(user, urls):
    client = _client(user)
    failures = []
    said = set()

    def check(what, response):
        said.add(what.rsplit("(", 1)[-1])
        if response.status_code >= 500:
            failures.append(f"{response.status_code} {what}")
        if not client.session.get("_auth_user_id"):  # a log-out form was posted: log in again
            client.force_login(user)

    sent = assault(client, urls, check=check)
    # Each odd value reached some URL in every name at once, the sample's or the whole sweep.
    assert {f"every name {label})" for label in ODD_VALUES} <= said
    return sent, failures


def _site_routes():
    """Every route but the admin's (walked from its own links below) and the signed intake
    endpoint (a JSON body, tested by tests/intake/test_events_fuzz.py)."""
    return [r for r in walk() if not r.route.startswith(("admin/", "intake/"))]


def test_no_odd_value_reaches_a_500_in_the_console(world):
    routes = _site_routes()
    assert {r.route for r in console_routes()} <= {r.route for r in routes}
    assert {"healthz", "accounts/login/", "metrics"} <= {r.route for r in routes}
    urls = [urls_for(route)[0] for route in routes]
    sent, failures = _walk(world, urls)
    assert sent > 500, sent
    assert not failures, f"{len(failures)} of {sent} answered 5xx:\n" + "\n".join(failures[:40])


def test_no_odd_value_reaches_a_500_in_the_admin(world):
    urls = admin_urls(_client(world))
    assert any("/admin/intake/enquiry/" in u for u in urls), urls
    sent, failures = _walk(world, urls)
    assert not failures, f"{len(failures)} of {sent} answered 5xx:\n" + "\n".join(failures[:40])


def test_the_reported_values_are_refused_or_ignored(world):
    """The values of issue 18, item 10, one by one: 400 or 404, or the page with the value
    ignored; never a 500."""
    client = _client(world)
    expected = {
        "/console/?page=%C2%B2": 200,
        "/console/?owner=%C2%B2": 200,
        "/console/review/?page=%C2%B2": 200,
        "/console/enquiries/?page=%C2%B2": 200,
        "/console/enquiries/?q=%00": 400,
        "/console/enquiries/%00/": 400,
        "/admin/intake/enquiry/?created_at__year=99999999999": 400,
        "/admin/intake/enquiry/?state__exact=%00": 400,
    }
    responses = {url: client.get(url) for url in expected}
    assert {url: r.status_code for url, r in responses.items()} == expected
    # An ignored value is said so on the page, not dropped silently.
    assert "Page “²” not understood" in responses["/console/review/?page=%C2%B2"].content.decode()
    assert "owner “²” not understood" in responses["/console/?owner=%C2%B2"].content.decode()
    before = snapshot()
    response = client.post(
        "/console/enquiries/TEST-001/reject/",
        "reason=customer%00withdrew",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 400
    assert snapshot() == before


def test_the_values_of_round_three_are_refused_or_bounded(world):
    """Issue 26, items 4, 7 and 8: each refused or bounded with a message, never a 500."""
    from recovery.models import DrillRun

    client = _client(world)
    if DrillRun.objects.exists():
        response = client.post(
            "/console/drill/",
            "run=abc&conclusion=looked",
            content_type="application/x-www-form-urlencoded",
        )
        assert response.status_code == 400
        assert "not a run number" in response.content.decode()
    words = "+".join(["w"] * 5000)
    response = client.get(f"/admin/intake/enquiry/?q={words}")
    assert response.status_code == 200
    assert "too long to run" in response.content.decode()
    before = snapshot()
    response = client.post(
        "/console/integrations/crm/settings/",
        "max_requests_per_second=5e-324&reason=tuning",
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code in (400, 403)
    assert snapshot() == before
