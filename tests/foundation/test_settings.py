import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.checks import Error
from django.test import override_settings

from config.checks import reads_leave_a_worker, timeouts_are_ordered


def test_ordered_timeouts_pass():
    assert timeouts_are_ordered(None) == []


@override_settings(CONNECTOR_TIMEOUT_SECONDS=70)
def test_connector_timeout_above_cluster_timeout_fails():
    errors = timeouts_are_ordered(None)
    assert [e.id for e in errors] == ["handover.E002"]
    assert isinstance(errors[0], Error)


@override_settings(Q_CLUSTER={**settings.Q_CLUSTER, "timeout": 90, "retry": 90})
def test_timeout_equal_to_retry_fails():
    assert [e.id for e in timeouts_are_ordered(None)] == ["handover.E002"]


def test_reads_leave_writes_a_worker_by_default():
    assert settings.Q_CLUSTER["workers"] - 1 == settings.READS_MAX_IN_FLIGHT
    assert reads_leave_a_worker(None) == []


@override_settings(READS_MAX_IN_FLIGHT=4, Q_CLUSTER={**settings.Q_CLUSTER, "workers": 4})
def test_reads_allowed_every_worker_are_warned_of():
    assert [w.id for w in reads_leave_a_worker(None)] == ["handover.W003"]


def _manage(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k != "PYTEST_VERSION"}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # a manage.py process
def test_check_deploy_is_clean_with_production_settings():
    """The settings alone: the database is one that is not there, so the readiness checks
    (handover.W1xx, which read it) find nothing; tests/recovery/test_production_steps.py walks
    a real install to a clean check."""
    from django.db import connection

    from config.db import connection_url

    nowhere = connection_url({**connection.settings_dict, "NAME": "handover_no_such_database"})
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DEBUG="0",
        SECURE="1",
        HANDOVER_TESTING="0",
        HANDOVER_DEV_TOOLS="0",
        SECRET_KEY="x7$Zq!9wLr2@pVn4#tBm8^sKc6&dHf1*gJy3(uE5)aQo0_iRe-TbWvXzYpNqMlKj",
        ALLOWED_HOSTS="handover.example.org",
        INTAKE_SECRETS='{"website": ["whsec_dGhpcy1pcy1ub3QtdGhlLWRlbW8tc2VjcmV0"]}',
        EMAIL_HOST="mail.example.org",
        DATABASE_URL=nowhere,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNINGS" not in result.stderr


@pytest.mark.slow  # a manage.py process
def test_a_bad_value_fails_loudly():
    result = _manage("check", Q_WORKERS="two", DEBUG="1")
    assert result.returncode != 0
    assert "Q_WORKERS='two' is not a whole number" in result.stderr


def test_integration_timeout_must_be_shorter_than_the_cluster_timeout(db):
    import pytest
    from django.core.exceptions import ValidationError

    from ledger.models import Integration

    row = Integration(name="crm", base_url="http://127.0.0.1:8765", timeout_seconds=60)
    with pytest.raises(ValidationError, match="shorter than the workers' timeout"):
        row.full_clean()
    row.timeout_seconds = 5
    row.full_clean()


def test_bad_email_settings_fail_loudly(monkeypatch):
    import pytest
    from django.core.exceptions import ImproperlyConfigured

    from config.env import env_email, env_port

    monkeypatch.setenv("EMAIL_PORT", "70000")
    with pytest.raises(ImproperlyConfigured, match="EMAIL_PORT=70000 is not a port"):
        env_port("EMAIL_PORT", 25)
    monkeypatch.setenv("EMAIL_PORT", "٣")
    with pytest.raises(ImproperlyConfigured, match="is not a whole number"):
        env_port("EMAIL_PORT", 25)
    monkeypatch.setenv("DEFAULT_FROM_EMAIL", "Council <not an address>")
    with pytest.raises(ImproperlyConfigured, match="is not an e-mail address"):
        env_email("DEFAULT_FROM_EMAIL", "x@example.org")
    monkeypatch.setenv("DEFAULT_FROM_EMAIL", "Council <noreply@example.org>")
    assert env_email("DEFAULT_FROM_EMAIL", "x@example.org") == "Council <noreply@example.org>"


@pytest.mark.slow  # a manage.py process
def test_tls_and_ssl_together_stop_the_process():
    result = _manage("check", EMAIL_USE_TLS="1", EMAIL_USE_SSL="1", DEBUG="1")
    assert result.returncode != 0
    assert "EMAIL_USE_TLS (STARTTLS, usually port 587) and EMAIL_USE_SSL" in result.stderr


@pytest.mark.parametrize("value", ["٣", "٣.5", "1_000", "nan", "inf", "1e999", "", "1.2.3"])
def test_a_decimal_setting_takes_ascii_digits_only(monkeypatch, value):
    from django.core.exceptions import ImproperlyConfigured

    from config.env import env_float

    monkeypatch.setenv("SOME_SECONDS", value)
    with pytest.raises(ImproperlyConfigured, match="SOME_SECONDS="):
        env_float("SOME_SECONDS", 1.0)


@pytest.mark.parametrize(
    ("value", "expected"), [("2", 2.0), (" 0.5 ", 0.5), (".25", 0.25), ("1e3", 1000.0)]
)
def test_a_decimal_setting_reads_plain_numbers(monkeypatch, value, expected):
    from config.env import env_float

    monkeypatch.setenv("SOME_SECONDS", value)
    assert env_float("SOME_SECONDS", 1.0) == expected


def test_the_example_environment_sets_each_variable_once():
    """A variable set twice in .env.example means one of its two lines says what is not so."""
    from collections import Counter
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[2] / ".env.example").read_text().splitlines()
    names = Counter(
        line.split("=", 1)[0].strip()
        for line in lines
        if "=" in line and not line.lstrip().startswith("#")
    )
    assert [name for name, count in names.items() if count > 1] == []
