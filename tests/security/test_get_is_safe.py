"""No state change on GET: every console URL, GET as an admin, changes nothing.

Actions answer 405 (or show a confirmation page); pages render. Either way the journal, every
enquiry's and operation's state and the task queue stay as they were.
"""

import pytest
from django.http import HttpResponse
from django.test import Client
from django.urls import path
from django.views.decorators.http import require_POST

from tests.security.conftest import snapshot
from tests.security.urlwalk import console_routes, crawl


def no_server_error(url, response):
    assert response.status_code < 500, f"GET {url} answered {response.status_code}"


def get_everything(client, routes):
    """GET every URL of every route; returns {route: [status, ...]}."""
    return crawl(client, routes, check=no_server_error)


def test_get_on_every_console_url_changes_nothing(world):
    client = Client()
    client.force_login(world)
    routes = console_routes()
    assert routes, "no console URL patterns found"
    before = snapshot()
    seen = get_everything(client, routes)
    assert snapshot() == before
    # A route whose every URL was 404 was not really exercised: its arguments could not be
    # filled from the database (teach tests/security/urlwalk.py the argument's name).
    unfilled = [route for route, statuses in seen.items() if set(statuses) == {404}]
    assert not unfilled, f"could not fill path arguments for: {unfilled}"


# --- the walker itself catches a GET that changes state ---------------------------------------


def _unsafe_retry(request, op_id):
    """A deliberately broken action: it retries on GET."""
    from django.db import transaction

    from ledger.models import Operation

    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=op_id)
        if op.state in ("failed", "unknown"):
            op.retry(actor="system:broken-view", reason="GET")
            op.save()
    return HttpResponse("retried")


@require_POST
def _safe_retry(request, op_id):
    return HttpResponse("would retry")


urlpatterns = [
    path("broken/operations/<uuid:op_id>/retry/", _unsafe_retry),
    path("fine/operations/<uuid:op_id>/retry/", _safe_retry),
]


@pytest.mark.urls("tests.security.test_get_is_safe")
def test_the_walker_catches_a_view_that_changes_state_on_get(world):
    client = Client()
    client.force_login(world)
    fine = console_routes(modules=("tests.security.test_get_is_safe",))
    assert {r.route for r in fine} == {
        "broken/operations/<uuid:op_id>/retry/",
        "fine/operations/<uuid:op_id>/retry/",
    }
    before = snapshot()
    seen = get_everything(client, [r for r in fine if r.route.startswith("fine/")])
    assert set(next(iter(seen.values()))) == {405}
    assert snapshot() == before
    get_everything(client, [r for r in fine if r.route.startswith("broken/")])
    after = snapshot()
    assert after["journal"] > before["journal"]
    assert after["operations"] != before["operations"]
