"""Every 403 writes one line on "handover.security": user, method, path; no personal data."""

import logging

import pytest
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.test import Client
from django.urls import path

from tests.security.urlwalk import candidate_pool, console_routes, urls_for


def _guarded(request, op_id):
    raise PermissionDenied("coordinators may not retry")


def _fine(request):
    return HttpResponse("ok")


urlpatterns = [
    path("console/operations/<uuid:op_id>/retry/", _guarded),
    path("console/fine/", _fine),
]


def security_lines(caplog):
    return [r for r in caplog.records if r.name == "handover.security"]


@pytest.mark.urls("tests.security.test_forbidden_log")
def test_permission_denied_is_logged_with_user_path_and_method(make_user, caplog):
    user = make_user("coordinator", username="dana")
    client = Client()
    client.force_login(user)
    url = "/console/operations/7d0c1f2e-0000-4000-8000-000000000001/retry/"
    with caplog.at_level(logging.INFO, logger="handover.security"):
        response = client.post(url + "?q=resident@example.com", {"reason": "Jane Resident"})
        ok = client.get("/console/fine/")
    assert response.status_code == 403
    assert ok.status_code == 200
    lines = security_lines(caplog)
    assert len(lines) == 1
    message = lines[0].getMessage()
    assert f"user_id={user.pk}" in message and "username=dana" in message
    assert "method=POST" in message
    assert f"path={url}" in message
    assert lines[0].levelno == logging.WARNING
    # Neither the query string nor the form body reaches the log.
    assert "resident@example.com" not in caplog.text
    assert "Jane Resident" not in caplog.text


def test_csrf_refusal_is_logged_too(db, caplog):
    client = Client(enforce_csrf_checks=True)
    with caplog.at_level(logging.INFO, logger="handover.security"):
        response = client.post("/accounts/login/", {"username": "x", "password": "y"})
    assert response.status_code == 403
    [line] = security_lines(caplog)
    assert "user=anonymous" in line.getMessage()
    assert "path=/accounts/login/" in line.getMessage()


def test_every_403_from_the_console_is_logged(world, make_user, caplog):
    """Walk the console as a user with no role: each 403 it meets has its log line."""
    nobody = make_user(None, username="norole")
    client = Client()
    client.force_login(nobody)
    pool = candidate_pool()
    forbidden = 0
    with caplog.at_level(logging.INFO, logger="handover.security"):
        for route in console_routes():
            for url in urls_for(route, pool)[:2]:
                for method in (client.get, client.post):
                    response = method(url)
                    if response.status_code == 403:
                        forbidden += 1
    lines = security_lines(caplog)
    # Actions need a role, so a user without one meets 403s (once the console has actions).
    assert forbidden or not any(r.arg_names for r in console_routes())
    assert len(lines) == forbidden
    assert all("username=norole" in line.getMessage() for line in lines)
