"""django-axes: a username is locked from one address only (no collateral lockout)."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.urls import reverse

PASSWORD = "pw-for-tests-only"  # tests/conftest.py make_user


def attempt(client, username, password, ip):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=ip
    )


@pytest.fixture
def alice(make_user):
    return make_user("coordinator", username="alice")


@pytest.fixture
def bob(make_user):
    return make_user("reviewer", username="bob")


@pytest.fixture
def locked_alice(client, alice):
    """Five wrong passwords for alice from 10.0.0.1."""
    for _ in range(settings.AXES_FAILURE_LIMIT):
        attempt(client, "alice", "wrong", "10.0.0.1")
    return alice


def test_failure_limit_and_cooloff_come_from_settings():
    assert settings.AXES_FAILURE_LIMIT == 5
    assert settings.AXES_COOLOFF_TIME.total_seconds() == 15 * 60
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]


def test_wrong_passwords_below_the_limit_show_the_login_form(client, alice):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        response = attempt(client, "alice", "wrong", "10.0.0.1")
        assert response.status_code == 200
        assert b"didn&#x27;t match" in response.content or b"didn't match" in response.content


def test_five_bad_passwords_lock_that_username_from_that_address(client, locked_alice):
    response = attempt(client, "alice", "wrong", "10.0.0.1")
    assert response.status_code == 429
    assert b"Too many failed log-in attempts" in response.content
    assert b"Traceback" not in response.content
    assert "_auth_user_id" not in client.session


def test_a_correct_password_while_locked_is_refused(client, locked_alice):
    response = attempt(client, "alice", PASSWORD, "10.0.0.1")
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert client.get("/console/").status_code == 302  # still anonymous


def test_another_user_from_the_same_address_still_logs_in(client, locked_alice, bob):
    response = attempt(client, "bob", PASSWORD, "10.0.0.1")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(bob.pk)


def test_the_same_user_from_another_address_is_not_locked(client, locked_alice):
    response = attempt(client, "alice", PASSWORD, "10.0.0.2")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(locked_alice.pk)


def test_forwarded_for_header_is_not_trusted_without_proxies(client, locked_alice):
    """Inventing an X-Forwarded-For does not give a locked client a fresh address."""
    response = client.post(
        reverse("login"),
        {"username": "alice", "password": PASSWORD},
        REMOTE_ADDR="10.0.0.1",
        HTTP_X_FORWARDED_FOR="192.0.2.77",
    )
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    # Counted against the socket's address; the invented one has no row of its own.
    assert not AccessAttempt.objects.filter(ip_address="192.0.2.77").exists()
    assert AccessAttempt.objects.get(username="alice", ip_address="10.0.0.1").failures_since_start


def test_behind_a_trusted_proxy_the_forwarded_address_counts(client, alice, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    proxy = "10.9.9.9"
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post(
            reverse("login"),
            {"username": "alice", "password": "wrong"},
            REMOTE_ADDR=proxy,
            HTTP_X_FORWARDED_FOR="spoofed, 198.51.100.1",
        )
    locked = client.post(
        reverse("login"),
        {"username": "alice", "password": PASSWORD},
        REMOTE_ADDR=proxy,
        HTTP_X_FORWARDED_FOR="198.51.100.1",
    )
    assert locked.status_code == 429
    other = client.post(
        reverse("login"),
        {"username": "alice", "password": PASSWORD},
        REMOTE_ADDR=proxy,
        HTTP_X_FORWARDED_FOR="198.51.100.2",
    )
    assert other.status_code == 302
    assert client.session["_auth_user_id"] == str(alice.pk)
    # The failures were counted against the forwarded client address, never the proxy's.
    attempt_row = AccessAttempt.objects.get(username="alice", ip_address="198.51.100.1")
    # The wrong passwords and the refused attempt while locked out.
    assert attempt_row.failures_since_start == settings.AXES_FAILURE_LIMIT + 1
    assert not AccessAttempt.objects.filter(ip_address=proxy).exists()


def test_authenticate_without_a_request_is_not_throttled_or_refused(client, alice):
    """The test client's login() and management commands authenticate without a request."""
    assert client.login(username="alice", password=PASSWORD)
    assert client.get("/console/").status_code == 200


def test_a_successful_login_resets_the_failure_count(client, alice):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        attempt(client, "alice", "wrong", "10.0.0.1")
    assert attempt(client, "alice", PASSWORD, "10.0.0.1").status_code == 302
    assert not AccessAttempt.objects.filter(username="alice").exists()  # the count is reset
    client.post(reverse("logout"))
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        attempt(client, "alice", "wrong", "10.0.0.1")
    assert attempt(client, "alice", PASSWORD, "10.0.0.1").status_code == 302
    assert client.session["_auth_user_id"] == str(alice.pk)


def test_lock_out_page_says_the_wait_in_words():
    from django.template.loader import render_to_string

    html = render_to_string(
        "registration/locked_out.html",
        {"failure_limit": 5, "cooloff_timedelta": timedelta(minutes=15)},
    )
    assert "Try again in 15 min." in html
    assert "hours:minutes:seconds" not in html and "0:15:00" not in html
