"""`manage.py runall` (make run): when the supervisor is killed, nothing runs on without it.

Real processes: runall on the test database starts the django-q2 cluster and the web server
(config.serve, waitress); the test SIGKILLs runall (no handler runs, no clean-up code) and
waits for every process it had started, grandchildren included, to exit. Nothing is timed:
the wait only bounds a failure.
"""

import os
import signal
import sys

import psutil
import pytest

from harness.processes import free_port
from tests.conftest import wait_for_condition
from tests.ledger.conftest import PROJECT_ROOT, child_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _wait_for_line(path, text, proc, timeout=120.0):
    def said():
        assert proc.poll() is None, f"runall exited:\n{path.read_text()[-3000:]}"
        return text in path.read_text(errors="replace")

    wait_for_condition(said, timeout=timeout, interval=0.1, message=f"runall to say {text!r}")


def test_killing_runall_stops_what_it_started(tmp_path):
    env = {**os.environ, "DATABASE_URL": child_database_url(), "PYTHONUNBUFFERED": "1"}
    log = tmp_path / "runall.log"
    port = free_port()
    with log.open("w") as out:
        runall = psutil.Popen(
            [sys.executable, "manage.py", "runall", "--no-sandbox", "--port", str(port)],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=out,
            stderr=out,
        )
    started = []
    try:
        _wait_for_line(log, "Handover is running on", runall)
        started = runall.children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in runall.children())
        assert "qcluster" in names and "config.serve" in names, names

        runall.send_signal(signal.SIGKILL)
        runall.wait(30)
        _gone, alive = psutil.wait_procs(started, timeout=60)
        assert not alive, f"still running without runall: {[p.cmdline() for p in alive]}"
    finally:
        for proc in started:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if runall.poll() is None:
            runall.kill()


def test_the_banner_says_where_the_demo_password_came_from(tmp_path, monkeypatch, settings):
    # Issue 27, defect 11: it said "DEMO_PASSWORD in .env" when it came from the environment.
    from ledger.management.commands.runall import password_source

    settings.BASE_DIR = tmp_path
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    assert password_source(seeded=True) == "password: printed above"
    assert "first seeded" in password_source(seeded=False)
    monkeypatch.setenv("DEMO_PASSWORD", "from-the-shell")
    assert password_source(seeded=True) == (
        "password: DEMO_PASSWORD from the environment, printed above"
    )
    (tmp_path / ".env").write_text("DEMO_PASSWORD=from-the-shell\n")
    assert "DEMO_PASSWORD in .env" in password_source(seeded=True)


def test_make_run_passes_port_through():
    from pathlib import Path

    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "manage.py runall $(if $(PORT),--port $(PORT))" in makefile
