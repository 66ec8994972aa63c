"""Persistent connections and Django's health check (CONN_HEALTH_CHECKS): a connection the
server has dropped is found and replaced before it is used.

A second session (its own connection) watches the first through pg_stat_activity and ends it
with pg_terminate_backend, as a restart would. Nothing here is timed: each wait is for
something PostgreSQL reports.
"""

import json
import os

import pytest
import requests
from django.db import connection, connections

from harness.drill.processes import WebServer
from intake.models import Enquiry
from tests.conftest import wait_for_condition
from tests.intake.conftest import SECRET
from tests.intake.signing import signed_headers
from tests.ledger.conftest import child_database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def watcher():
    other = connections.create_connection("default")
    yield other
    other.close()


def _one(db, sql, params=()):
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _last_statement(watcher, pid):
    row = _one(watcher, "SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
    return row[0] if row else None


def _marked(marker):
    """This connection's last statement, as the server will show it."""
    _one(connection, f"SELECT '{marker}'")
    return _one(connection, "SELECT pg_backend_pid()")[0]


def _begin_request():
    # What Django does when a request (or a django-q2 task) starts and reaches its first query.
    connection.close_if_unusable_or_obsolete()
    connection.close_if_health_check_failed()


def test_a_connection_the_server_ended_is_replaced_before_it_is_used(watcher):
    pid = _marked("about to be ended")
    assert _one(watcher, "SELECT pg_terminate_backend(%s)", [pid])[0] is True
    wait_for_condition(
        lambda: _last_statement(watcher, pid) is None, timeout=10.0, message="the backend has gone"
    )

    assert not connection.is_usable()
    _begin_request()
    # The request's first query runs on a new session, and answers.
    assert _one(connection, "SELECT pg_backend_pid()")[0] != pid


def _post_event(url):
    body = json.dumps(
        {
            "name": "Ada",
            "email": "ada@example.org",
            "message": "The bin was missed.",
            "consent": True,
        }
    ).encode()
    headers = {"Content-Type": "application/json", **signed_headers(body, SECRET)}
    return requests.post(f"{url}/intake/events/website/", data=body, headers=headers, timeout=30)


@pytest.fixture
def web_server(tmp_path):
    """The web server (one process, one thread: one persistent connection) on the test database."""
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "INTAKE_SECRETS": json.dumps({"website": [SECRET]}),
        "CONN_MAX_AGE": "60",
    }
    server = WebServer(tmp_path / "web.log", env, workers=1, threads=1).start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_the_endpoint_answers_after_the_server_ended_its_sessions(web_server, watcher):
    # As after a PostgreSQL restart: every session but this test's own is ended while the web
    # server holds its persistent connection. Its next request must not answer 5xx.
    assert _post_event(web_server.url).status_code == 202, web_server.log()
    keep = [
        _one(connection, "SELECT pg_backend_pid()")[0],
        _one(watcher, "SELECT pg_backend_pid()")[0],
    ]
    with watcher.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> ALL(%s)",
            [keep],
        )
        ended = cursor.rowcount
    assert ended >= 1, "the web server held no session to end"
    wait_for_condition(
        lambda: (
            _one(
                watcher,
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> ALL(%s)",
                [keep],
            )[0]
            == 0
        ),
        timeout=10.0,
        message="the ended sessions have gone",
    )

    answer = _post_event(web_server.url)
    assert answer.status_code == 202, answer.text
    assert Enquiry.objects.count() == 2
