"""Loading the settings has no side effect, and production installs no test equipment.

Each test loads the settings in a process of its own, with the environment it names: what a
process imports and starts is a property of the whole process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LOAD = """
import json, os, sys
import psutil
import django
django.setup()
from django.conf import settings
print(json.dumps({
    "pgserver_loaded": "pgserver" in sys.modules,
    "children": [p.name() for p in psutil.Process().children(recursive=True)],
    "database_url": os.environ.get("DATABASE_URL"),
    "engine": settings.DATABASES["default"]["ENGINE"],
    "apps": settings.INSTALLED_APPS,
}))
"""


CONNECT = """
import json, os, sys
import django
django.setup()
from django.db import connection
before = "pgserver" in sys.modules
with connection.cursor() as cursor:
    cursor.execute("SELECT 1")
print(json.dumps({
    "before": before,
    "host": connection.settings_dict["HOST"],
    "database_url": os.environ.get("DATABASE_URL"),
}))
"""


def _load_settings(script: str = LOAD, **env: str) -> dict:
    full_env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("XDG_RUNTIME_DIR", "HANDOVER_DEV_TOOLS")
    }
    # DATABASE_URL empty (set, so a .env cannot fill it in): the embedded server's settings.
    full_env.update(
        DJANGO_SETTINGS_MODULE="config.settings", SECRET_KEY="x", DATABASE_URL="", **env
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow  # a Python of its own
def test_loading_the_settings_without_a_database_url_starts_nothing():
    """No DATABASE_URL: the embedded backend is named, and the server is started by the first
    connection (config/embedded/base.py), not by django.setup()."""
    loaded = _load_settings()
    assert loaded["engine"] == "config.embedded"
    assert loaded["pgserver_loaded"] is False
    assert loaded["children"] == []
    assert loaded["database_url"] == ""


@pytest.mark.slow  # a Python of its own
def test_production_installs_no_test_equipment():
    production = _load_settings(DEBUG="0", HANDOVER_TESTING="0", HANDOVER_DEV_TOOLS="0")
    assert "ledger" in production["apps"]
    assert not {"sandbox", "harness"} & set(production["apps"])
    development = _load_settings(DEBUG="0", HANDOVER_TESTING="0", HANDOVER_DEV_TOOLS="1")
    assert {"sandbox", "harness"} <= set(development["apps"])


@pytest.mark.slow  # a Python of its own
def test_a_test_run_installs_the_test_equipment_unless_told_not_to():
    """The tests' own processes (pytest sets PYTEST_VERSION) have the apps by default."""
    assert {"sandbox", "harness"} <= set(_load_settings(HANDOVER_TESTING="1")["apps"])


@pytest.mark.slow  # a Python of its own
def test_the_first_connection_starts_the_embedded_server():
    """The embedded server under var/pgdata (as `make run` uses it): started by the first
    query, and its address handed on to child processes through DATABASE_URL."""
    connected = _load_settings(CONNECT)
    assert connected["before"] is False
    assert connected["host"]  # the server's socket directory, filled in on connecting
    assert connected["database_url"].startswith("postgresql://postgres")


PREPARING = """
import json
import django
django.setup()
from django.conf import settings
print(json.dumps(settings.DATABASES["default"]["OPTIONS"].get("prepare_threshold")))
"""


@pytest.mark.slow  # a Python of its own
def test_prepared_statements_are_on_unless_turned_off():
    """config.roundtrip's statements are prepared when the connection's prepare_threshold is
    set (only they ask for it); DB_PREPARED_STATEMENTS=0 leaves it None, psycopg's off."""
    assert _load_settings(PREPARING) == 2**31 - 1
    assert _load_settings(PREPARING, DB_PREPARED_STATEMENTS="0") is None


def test_check_deploy_warns_when_the_test_equipment_is_installed():
    """A test run installs it, so the check speaks; without it (HANDOVER_DEV_TOOLS=0),
    tests/foundation/test_settings.py's production check --deploy is clean."""
    from config.checks import no_test_equipment

    assert [message.id for message in no_test_equipment(None)] == ["handover.W202"]
