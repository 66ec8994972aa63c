"""Sessions end: idle, absolute limit, logout, deactivation, password change."""

from datetime import timedelta

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from config import security

PASSWORD = "pw-for-tests-only"


class Clock:
    """A frozen clock for config.security.now: tests move it by hand."""

    def __init__(self):
        self.at = timezone.now()

    def __call__(self):
        return self.at

    def advance(self, seconds):
        self.at += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(security, "now", clock)
    return clock


@pytest.fixture
def user(make_user):
    return make_user("coordinator", username="carol")


def log_in(client, username="carol"):
    response = client.post(reverse("login"), {"username": username, "password": PASSWORD})
    assert response.status_code == 302, response.content[:300]


def is_logged_in(client):
    response = client.get("/console/")
    return response.status_code == 200


@pytest.fixture
def settings_short(settings):
    settings.SESSION_IDLE_SECONDS = 600
    settings.SESSION_COOKIE_AGE = 3600
    return settings


def test_active_session_stays_logged_in(client, user, clock, settings_short):
    log_in(client)
    for _ in range(6):  # a request every 9 minutes for 54 minutes: never idle 10
        clock.advance(9 * 60)
        assert is_logged_in(client)


def test_idle_session_is_logged_out(client, user, clock, settings_short):
    log_in(client)
    assert is_logged_in(client)
    old_key = client.session.session_key
    clock.advance(601)
    response = client.get("/console/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert not Session.objects.filter(session_key=old_key).exists()
    assert not is_logged_in(client)


def test_idle_just_under_the_limit_is_kept(client, user, clock, settings_short):
    log_in(client)
    clock.advance(599)
    assert is_logged_in(client)


def test_session_older_than_the_absolute_limit_is_logged_out(client, user, clock, settings_short):
    log_in(client)
    for _ in range(7):  # busy all the time: a request every 500 s, 3,500 s after login
        clock.advance(500)
        assert is_logged_in(client)
    clock.advance(200)  # 3,700 s after login, only 200 s idle: the absolute limit ends it
    response = client.get("/console/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert not is_logged_in(client)


def test_logout_ends_the_session_server_side(user):
    client = Client()
    log_in(client)
    cookie = client.cookies["sessionid"].value
    assert Session.objects.filter(session_key=cookie).exists()
    assert client.post(reverse("logout")).status_code == 302
    assert not Session.objects.filter(session_key=cookie).exists()
    replay = Client()
    replay.cookies["sessionid"] = cookie  # the old cookie, kept by an attacker
    assert replay.get("/console/").status_code == 302


def test_logout_by_get_is_refused(user):
    client = Client()
    log_in(client)
    assert client.get(reverse("logout")).status_code == 405
    assert is_logged_in(client)


def test_deactivated_user_is_logged_out_at_the_next_request(user):
    client = Client()
    log_in(client)
    assert is_logged_in(client)
    user.is_active = False
    user.save()
    response = client.get("/console/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_changing_the_password_ends_other_sessions(user):
    laptop, phone = Client(), Client()
    log_in(laptop)
    log_in(phone)
    assert is_logged_in(laptop) and is_logged_in(phone)
    user.set_password("a-brand-new-passphrase")
    user.save()
    assert not is_logged_in(laptop)
    assert not is_logged_in(phone)
    fresh = Client()
    response = fresh.post(
        reverse("login"), {"username": "carol", "password": "a-brand-new-passphrase"}
    )
    assert response.status_code == 302
    assert is_logged_in(fresh)
