"""`manage.py drill` end to end: its own sandbox, web server and qcluster on this test database,
every case of the design's table, the JSON shape, the exit code, the run kept for the console."""

import json
import os
import subprocess
import sys

import pytest

from harness.drill.cases import CASES
from ledger.integrations import ensure_integrations
from ledger.models import Integration
from recovery.models import DrillRun
from tests.conftest import wait_for_condition
from tests.ledger.conftest import PROJECT_ROOT, child_database_url

# The roles (groups from a migration) are remade after every flush by post_migrate
# (recovery.roles); a serialized rollback would inhibit that and leave the next test without.
DRILL_DB = pytest.mark.django_db(transaction=True)

CASE_KEYS = {"name", "input_reference", "expected", "observed", "destination_records", "passed"}
DESIGN_TABLE = [
    "valid new event",
    "same event delivered twice (and 50 times at once)",
    "invalid fields",
    "destination unavailable",
    "timeout after the destination committed",
    "worker killed after the remote write succeeded",
    "destination cannot be looked up",
    "document access removed",
    "the document changed between reads",
    "the document store does not answer in time",
    "a reviewer's correction, then the same version read again",
    "enquiry changed after approval",
    "uncertain classification",
    "CRM succeeds, notification fails",
    "e-mail: the relay's reply lost after the final dot",
    "e-mail: the relay refuses the recipient (550)",
    "e-mail: the relay answers 421",
    "e-mail: the relay is down, then back",
    "a resident reply by e-mail and by the page",
    "category corrected before a retry",
    "integration paused",
    "appointments: the calendar is slow",
    "appointments: the calendar is unavailable",
    "appointments: the slots are stale",
    "appointments: the calendar changed between two reads",
]
APPOINTMENT_CASES = [
    "appointments-slow",
    "appointments-unavailable",
    "appointments-stale",
    "appointments-changed",
]


def integration_settings():
    return {
        row["name"]: row
        for row in Integration.objects.values(
            "name", "base_url", "timeout_seconds", "retry_budget", "paused", "supports_lookup"
        )
    }


def run_drill(*args) -> subprocess.CompletedProcess:
    """``manage.py drill *args`` on this test's database, in its own session."""
    return subprocess.run(
        [sys.executable, "manage.py", "drill", *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DATABASE_URL": child_database_url()},
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def test_every_case_of_the_drill_table_is_a_case():
    assert [spec.name for spec in CASES] == DESIGN_TABLE


@pytest.mark.slow
@DRILL_DB
def test_the_drill_runs_every_case_for_real_and_passes(tmp_path):
    ensure_integrations()
    before = integration_settings()
    json_path, html_path = tmp_path / "drill.json", tmp_path / "drill.html"
    env = {**os.environ, "DATABASE_URL": child_database_url()}
    finished = subprocess.run(
        [sys.executable, "manage.py", "drill", "--json", str(json_path), "--html", str(html_path)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
    )
    output = finished.stdout + finished.stderr
    report = json.loads(json_path.read_text())

    assert {"integration", "started_at", "finished_at", "cases"} <= set(report)
    assert report["integration"].startswith("sandbox at http://127.0.0.1:")
    assert [case["name"] for case in report["cases"]] == DESIGN_TABLE
    for case in report["cases"]:
        assert set(case) >= CASE_KEYS, case
        assert case["passed"] is True, f"{case['name']}: {case['observed']}\n{output[-4000:]}"
        assert case["input_reference"].startswith("DRILL-")
    assert finished.returncode == 0, output[-4000:]
    assert f"{len(DESIGN_TABLE)} of {len(DESIGN_TABLE)} cases passed" in finished.stdout

    html = html_path.read_text()
    assert "every case passed" in html and "DRILL-" in html
    run = DrillRun.objects.get()
    assert run.passed and run.cases_total == run.cases_passed == len(DESIGN_TABLE)
    assert run.report == report
    # The console's integrations point where they pointed before, not at the drill's dead port.
    assert integration_settings() == before


@pytest.mark.slow
@DRILL_DB
def test_the_appointment_cases_run_against_radicale_through_the_proxy(tmp_path):
    ensure_integrations()
    before = integration_settings()
    json_path = tmp_path / "drill.json"
    command = [sys.executable, "manage.py", "drill", "--sandbox", "--json", str(json_path)]
    for key in APPOINTMENT_CASES:
        command += ["--case", key]
    finished = subprocess.run(
        command,
        cwd=PROJECT_ROOT,
        env={**os.environ, "DATABASE_URL": child_database_url()},
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
    )
    output = finished.stdout + finished.stderr
    report = json.loads(json_path.read_text())
    cases = report["cases"]
    assert [case["name"] for case in cases] == DESIGN_TABLE[-4:], output[-3000:]
    for case in cases:
        assert case["passed"] is True, f"{case['name']}: {case['observed']}\n{output[-3000:]}"
        assert case["destination"].startswith("appointments: Radicale at http://127.0.0.1:")
        assert case["destination_records"] >= 2  # the seeded busy events, counted at Radicale
    assert finished.returncode == 0, output[-3000:]
    assert integration_settings() == before


@pytest.mark.slow
@DRILL_DB
def test_a_crm_that_cannot_be_reached_stops_the_drill_before_any_case(tmp_path):
    """Against a CRM that is not the sandbox the drill runs through the fault proxy, after the
    kind's own check: an unreachable CRM is said in plain words, nothing runs, the rows are
    put back."""
    from ledger.models import Integration

    ensure_integrations()
    Integration.objects.update(base_url="http://127.0.0.1:9")  # nothing listens on discard
    json_path = tmp_path / "drill.json"
    finished = run_drill("--json", str(json_path), "--case", "paused")
    assert finished.returncode != 0
    assert "The drill could not start: the CRM is not ready" in finished.stderr
    assert "Cannot reach http://127.0.0.1:9" in finished.stderr
    assert "Traceback" not in finished.stderr
    assert not json_path.exists()
    assert Integration.objects.filter(base_url="http://127.0.0.1:9").count() == 4


@pytest.mark.slow  # a manage.py drill process
@pytest.mark.django_db
def test_the_drill_refuses_an_unmigrated_database_plainly():
    """A real empty database on the test server: no traceback, one line saying what to run."""
    from django.db import connection

    from config.db import connection_url

    name = f"{connection.settings_dict['NAME']}_empty"
    with connection._nodb_cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        env = {
            **os.environ,
            "DATABASE_URL": connection_url({**connection.settings_dict, "NAME": name}),
        }
        finished = subprocess.run(
            [sys.executable, "manage.py", "drill"],
            cwd=PROJECT_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        with connection._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert finished.returncode != 0
    assert "unapplied migration(s): run `python manage.py migrate` first" in finished.stderr
    assert "Traceback" not in finished.stderr


@pytest.mark.slow
@DRILL_DB
def test_the_drill_refuses_to_run_beside_a_live_cluster(tmp_path, start_cluster):
    """A live cluster on the drill's database would take the drill's tasks (its crash case
    could not tell whose work it crashed on) and operators would see the drill's enquiries:
    the drill says so and runs nothing."""
    from intake.models import Enquiry
    from ledger.worker import workers_on_this_database

    ensure_integrations()
    before = integration_settings()
    live = start_cluster(name="live")
    wait_for_condition(
        workers_on_this_database, timeout=120, message=f"the live cluster\n{live.log()}"
    )

    finished = run_drill("--sandbox", "--case", "paused")

    assert finished.returncode != 0
    assert "Refusing to run: a django-q2 cluster is working on this database" in finished.stderr
    assert "a database of its own" in finished.stderr
    assert "Traceback" not in finished.stderr
    assert not DrillRun.objects.exists() and not Enquiry.objects.exists()
    assert integration_settings() == before
    assert live.running  # the live cluster was left alone
