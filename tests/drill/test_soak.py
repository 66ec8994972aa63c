"""bench/soak.py at a small N in CI: a bad day (duplicates, faults of every mode, worker kills,
a PostgreSQL restart) and nothing lost, nothing duplicated, nothing stuck out of sight."""

import json
import os
import subprocess
import sys

import pytest

from tests.ledger.conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow

FIGURES = {
    "events_sent",
    "distinct_events",
    "enquiries",
    "destination_records",
    "duplicate_records",
    "lost",
    "unresolved_visible",
    "unresolved_invisible",
    "worker_kills",
    "db_restarts",
    "seconds",
}


def test_a_small_soak_loses_nothing(tmp_path):
    out = tmp_path / "soak.json"
    # The soak runs its own PostgreSQL (it restarts it), so it never touches the test database.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    finished = subprocess.run(
        [
            sys.executable,
            "bench/soak.py",
            "--events",
            "100",
            "--duplicate-rate",
            "0.2",
            "--fault-rate",
            "0.2",
            "--kill-every",
            "3",
            "--seed",
            "7",
            "--json",
            str(out),
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,
    )
    log = (finished.stdout + finished.stderr)[-4000:]
    figures = json.loads(out.read_text())
    assert set(figures) >= FIGURES, log
    assert figures["distinct_events"] == 100
    assert figures["events_sent"] > 100, "some events are delivered again"
    assert figures["enquiries"] == 100, figures["details"]
    assert figures["lost"] == 0, figures["details"]
    assert figures["duplicate_records"] == 0, figures["details"]
    assert figures["unresolved_invisible"] == 0, figures["details"]
    assert figures["destination_records"] + figures["unresolved_visible"] >= 100
    assert figures["worker_kills"] >= 2, log
    assert figures["db_restarts"] == 1, figures["details"]["db_restart"]
    assert finished.returncode == 0, log


def test_a_soak_with_the_relay_down_sends_every_acknowledgement_once_with_nobody(tmp_path):
    out = tmp_path / "soak.json"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    finished = subprocess.run(
        [
            sys.executable,
            "bench/soak.py",
            "--events",
            "20",
            "--duplicate-rate",
            "0",
            "--fault-rate",
            "0",
            "--kill-every",
            "0",
            # Long enough to outlast the cluster's recovery from the soak's PostgreSQL restart
            # (django-q2 brings its pusher back within about 10 s): acknowledgements are due.
            "--relay-down",
            "20",
            "--json",
            str(out),
        ],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,
    )
    log = (finished.stdout + finished.stderr)[-4000:]
    figures = json.loads(out.read_text())
    # The relay refused while the acknowledgements were due: some were waiting when it came back.
    waiting = figures["acknowledgements_by_state_when_back"].get("approved", 0)
    assert waiting > 0, figures
    assert figures["acknowledgements"] == figures["acknowledgements_confirmed"] == 20, figures
    assert figures["acknowledgements_at_relay"] == 20, figures
    assert figures["relay_duplicates"] == 0, figures
    assert figures["people_involved"] == 0, figures
    assert finished.returncode == 0, log
