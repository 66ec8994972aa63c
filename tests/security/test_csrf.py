"""CSRF on every form: only the signed intake endpoint is exempt.

The walkers read the project's resolver, so views added later are checked without edits.
"""

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client

from tests.security.conftest import snapshot
from tests.security.urlwalk import console_routes, urls_for, walk

# Machine-to-machine, authenticated by its Standard Webhooks signature instead of a cookie
# (with or without the trailing slash: one view).
CSRF_EXEMPT_ROUTES = {
    "intake/events/<source>/",
    "intake/events/<source>",
    # A mail provider's delivery reports: signed (HMAC) and basic auth, never a browser's form.
    "delivery/mailgun/",
    # Residents' replies forwarded by a Mailgun route: signed (HMAC), never a browser's form.
    "inbound/mailgun/",
}


def test_csrf_middleware_is_installed():
    assert "django.middleware.csrf.CsrfViewMiddleware" in settings.MIDDLEWARE


def test_no_view_is_csrf_exempt_except_the_intake_endpoint():
    # CsrfViewMiddleware.process_view skips exactly the callbacks with csrf_exempt set; class
    # based views carry the flag from dispatch() onto the as_view() function.
    routes = list(walk())
    assert len(routes) > 10, "the walker found too few URL patterns to be trusted"
    exempt = {r.normalized for r in routes if getattr(r.callback, "csrf_exempt", False)}
    assert exempt <= CSRF_EXEMPT_ROUTES, f"CSRF-exempt views: {sorted(exempt)}"


def test_the_intake_endpoint_is_registered_and_exempt():
    intake = [r for r in walk() if r.normalized in CSRF_EXEMPT_ROUTES]
    assert intake, "intake/urls.py does not register intake/events/<source>/"
    assert all(getattr(r.callback, "csrf_exempt", False) for r in intake)


@pytest.fixture
def csrf_client(world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world)
    return client


def test_post_without_a_token_to_any_console_url_is_403(csrf_client, caplog):
    routes = console_routes()
    assert routes, "no console URL patterns found"
    before = snapshot()
    refused = []
    for route in routes:
        url = urls_for(route)[0]
        response = csrf_client.post(url, {"reason": "no token"})
        if response.status_code != 403:
            refused.append(f"{url} -> {response.status_code}")
    assert not refused, "POST without a CSRF token was not refused: " + ", ".join(refused)
    assert snapshot() == before


def test_post_with_a_token_gets_past_csrf(csrf_client):
    """The refusal above is CSRF's: the same POST with the token is not a CSRF 403."""
    csrf_client.get("/console/")
    token = csrf_client.cookies[settings.CSRF_COOKIE_NAME].value
    response = csrf_client.post(
        "/accounts/logout/", {"csrfmiddlewaretoken": token}, HTTP_REFERER="/console/"
    )
    assert response.status_code == 302
    assert not Session.objects.exists()  # the logout went through: the session row is gone


def test_login_form_without_a_token_is_403(world):
    client = Client(enforce_csrf_checks=True)
    before = snapshot()
    response = client.post("/accounts/login/", {"username": "admin", "password": "x"})
    assert response.status_code == 403
    assert not AccessAttempt.objects.exists()  # refused before the password was even tried
    assert snapshot() == before
