"""README "Production", walked: an empty database, the documented steps as a person types
them (each a real ``manage.py`` process), and the readiness checks before and after.

1. before provisioning, ``check`` names every gap (handover.W101-W106);
2. after provision + check_integration --all, ``check --deploy`` names nothing of Handover's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # real processes: manage.py and the sandbox


@pytest.fixture
def empty_database(db):
    """A database of its own on the test server, empty: as a new install finds it."""
    from django.db import connection

    from config.db import connection_url

    settings = dict(connection.settings_dict)
    name = f"handover_steps_{uuid.uuid4().hex[:10]}"
    admin = connection_url({**settings, "NAME": "postgres"})
    with psycopg.connect(admin, autocommit=True) as raw:
        raw.execute(f'CREATE DATABASE "{name}"')
    yield connection_url({**settings, "NAME": name})
    with psycopg.connect(admin, autocommit=True) as raw:
        raw.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def step(env, *args, ok=True) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = done.stdout + done.stderr
    if ok:
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{said}"
    return said


def test_the_documented_steps_take_a_fresh_database_to_ready(empty_database, sandbox, tmp_path):
    from harness.mailserver import MailServer

    with MailServer(tmp_path / "mail") as relay:
        walk_the_steps(empty_database, sandbox, relay)


def walk_the_steps(empty_database, sandbox, relay):
    secret = "whsec_" + __import__("base64").b64encode(os.urandom(24)).decode()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST", "DJANGO_SETTINGS", "HANDOVER_TESTING"))
    }
    env.update(
        {
            # Step 1, the settings (README, "Production").
            "DEBUG": "0",
            "HANDOVER_DEV_TOOLS": "0",
            "SECRET_KEY": uuid.uuid4().hex * 2,
            "ALLOWED_HOSTS": "handover.council.example",
            "DATABASE_URL": empty_database,
            "INTAKE_SECRETS": f'{{"website": ["{secret}"]}}',
            "CONSOLE_URL": "https://handover.council.example/console/",
            # E-mail through the council's relay (a real SMTP server here).
            "NOTIFY_KIND": "smtp",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(relay.port),
            "METRICS_TOKEN": uuid.uuid4().hex,
            "SECURE": "1",
            "CSRF_TRUSTED_ORIGINS": "https://handover.council.example",
            "TRUSTED_PROXY_COUNT": "1",
            **{f"{p}_BASE_URL": sandbox.url for p in ("CRM", "DOCS", "APPOINTMENTS")},
            "DJANGO_SUPERUSER_USERNAME": "root",
            "DJANGO_SUPERUSER_EMAIL": "root@council.example",
            "DJANGO_SUPERUSER_PASSWORD": uuid.uuid4().hex,
        }
    )
    step(env, "migrate", "--noinput")  # 2 (the checks must not stand in its way)
    step(env, "createsuperuser", "--noinput")  # 4
    before = step(env, "check")
    for check_id in ("W101", "W102", "W103", "W105", "W106"):
        assert f"handover.{check_id}" in before, before
    assert "handover.W104" not in before  # NOTIFY_KIND=smtp

    provisioned = step(env, "provision", "docs/provision.toml")  # 5
    assert "change(s) made and journalled" in provisioned, provisioned
    assert "Nothing to change" in step(env, "provision", "docs/provision.toml")
    checked = step(env, "check_integration", "--all")  # 6
    assert checked.count("ready: nothing wrong found") == 4, checked

    after = step(env, "check", "--deploy")  # 9
    assert "handover." not in after, after

    # With the demo's published secret, check --deploy refuses (3b).
    demo = {**env, "INTAKE_SECRETS": '{"website": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}'}
    assert "handover.E201" in step(demo, "check", "--deploy", ok=False)
    assert "handover.W201" in step({**env, "INTAKE_SECRETS": "{}"}, "check", "--deploy")
