"""config.logins in one process: which requests the bound counts, and what one beyond it gets.
The bound under real concurrency, against config.serve: tests/security/test_logins.py."""

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from config.logins import LoginConcurrencyMiddleware, LoginSlots


@pytest.fixture
def guarded(settings):
    settings.LOGIN_CONCURRENCY = 2
    settings.LOGIN_CONCURRENCY_PER_CLIENT = 1
    reached = []

    def view(request):
        reached.append(request.path)
        return HttpResponse("signed in")

    middleware = LoginConcurrencyMiddleware(view)
    middleware.reached = reached
    return middleware


def test_slots_are_bounded_overall_and_per_address():
    slots = LoginSlots(limit=2, per_client=1)
    assert slots.take("a")
    assert not slots.take("a")  # per address
    assert slots.take("b")
    assert not slots.take("c")  # overall
    slots.give_back("a")
    assert slots.take("c") and not slots.by_client["a"]


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_a_log_in_beyond_the_bound_gets_the_page_at_once(guarded, path):
    guarded.slots.take("127.0.0.1")  # one log-in from this address is being checked

    response = guarded(RequestFactory().post(path, {"username": "a", "password": "b"}))

    assert response.status_code == 429
    assert response["Retry-After"] == "2"
    assert "Too many sign-ins at once" in response.content.decode()
    assert "try again in a moment" in response.content.decode()
    assert guarded.reached == []  # the view (and so the password check) never ran


def test_a_log_in_within_the_bound_runs_and_gives_its_slot_back(guarded):
    response = guarded(RequestFactory().post("/accounts/login/", {"username": "a"}))

    assert response.status_code == 200 and guarded.reached == ["/accounts/login/"]
    assert guarded.slots.running == 0 and not guarded.slots.by_client


def test_neither_a_get_nor_another_post_is_bounded(guarded):
    guarded.slots.take("127.0.0.1")
    guarded.slots.take("127.0.0.2")

    assert guarded(RequestFactory().get("/accounts/login/")).status_code == 200
    assert guarded(RequestFactory().post("/console/")).status_code == 200
    assert guarded.reached == ["/accounts/login/", "/console/"]
