"""Database waits are bounded: every connection gives up on a lock after DB_LOCK_TIMEOUT_SECONDS,
a web process's statements stop after DB_STATEMENT_TIMEOUT_SECONDS, and a web request that runs
into either answers 503 "busy, try again" with nothing changed.

A second session (its own connection) holds the row lock, as a long transaction elsewhere
would. Nothing is timed: the lock timeout is what ends the wait.
"""

import os
import subprocess
import sys

import pytest
from django.db import connection, connections
from django.urls import reverse

from ledger.models import JournalEntry, Operation
from tests.ledger.conftest import PROJECT_ROOT, child_database_url


def _show(db, name):
    with db.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_every_connection_waits_for_a_lock_at_most_the_lock_timeout():
    assert _show(connection, "lock_timeout") == "10s"
    # Not a web process (tests, workers, commands): no statement timeout.
    assert _show(connection, "statement_timeout") == "0"


@pytest.mark.slow  # a Python process loads config.wsgi
@pytest.mark.django_db
def test_a_web_process_has_a_statement_timeout_and_both_are_configurable():
    """config/wsgi.py (what every web server loads) marks the process as a web process."""
    script = (
        "import config.wsgi\n"
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SHOW lock_timeout'); lock = c.fetchone()[0]\n"
        "    c.execute('SHOW statement_timeout'); statement = c.fetchone()[0]\n"
        "print(lock, statement)\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "DB_LOCK_TIMEOUT_SECONDS": "3",
        "DB_STATEMENT_TIMEOUT_SECONDS": "7.5",
    }
    env.pop("HANDOVER_WEB", None)
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["3s", "7500ms"]


@pytest.fixture
def short_lock_timeout():
    """This process's connection, reopened with a lock timeout of 200 ms (through the same
    connection options the settings write), so the test does not wait the default 10 s."""
    options = connection.settings_dict["OPTIONS"]
    saved = options["options"]
    options["options"] = saved.replace("-c lock_timeout=10000", "-c lock_timeout=200")
    assert options["options"] != saved
    connection.close()
    yield
    options["options"] = saved
    connection.close()


@pytest.fixture
def holder():
    other = connections.create_connection("default")
    yield other
    if not other.get_autocommit():
        other.rollback()
    other.close()


@pytest.mark.django_db(transaction=True)
def test_a_held_row_lock_answers_503_and_changes_nothing(
    story, client_for, holder, short_lock_timeout
):
    op = story.operation("unknown", attention="lookup_failed")
    before = (
        list(Operation.objects.filter(pk=op.pk).values_list("state", "attention", "owner_id")),
        JournalEntry.objects.count(),
    )
    holder.set_autocommit(False)
    with holder.cursor() as cursor:
        cursor.execute("SELECT id FROM ledger_operation WHERE id = %s FOR UPDATE", [op.pk])
    assert _show(connection, "lock_timeout") == "200ms"

    response = client_for("coordinator").post(
        reverse("recovery:op-reconcile", args=[op.pk]), {"reason": "customer rang"}
    )

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert b"try again" in response.content
    holder.rollback()
    after = (
        list(Operation.objects.filter(pk=op.pk).values_list("state", "attention", "owner_id")),
        JournalEntry.objects.count(),
    )
    assert after == before
