"""`manage.py runall` (make run): when the supervisor is killed, nothing runs on without it.

Real processes: runall on the test database starts the django-q2 cluster and the web server
(config.serve, waitress); the test SIGKILLs runall (no handler runs, no clean-up code) and
waits for every process it had started, grandchildren included, to exit. Nothing is timed:
the wait only bounds a failure.
"""

import os
import signal
import smtplib
import socket
import sys

import psutil
import pytest

from harness.processes import free_port
from tests.conftest import wait_for_condition
from tests.ledger.conftest import PROJECT_ROOT, child_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _mail_accepts(port) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _wait_for_line(path, text, proc, timeout=120.0):
    def said():
        assert proc.poll() is None, f"runall exited:\n{path.read_text()[-3000:]}"
        return text in path.read_text(errors="replace")

    wait_for_condition(said, timeout=timeout, interval=0.1, message=f"runall to say {text!r}")


def test_killing_runall_stops_what_it_started(tmp_path):
    mail_port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "PYTHONUNBUFFERED": "1",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(mail_port),
    }
    log = tmp_path / "runall.log"
    port = free_port()
    mail_dir = tmp_path / "mail"
    with log.open("w") as out:
        runall = psutil.Popen(
            [
                sys.executable,
                "manage.py",
                "runall",
                "--no-sandbox",
                "--port",
                str(port),
                "--mail-dir",
                str(mail_dir),
            ],
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
        assert "runmailserver" in names, names
        # The local relay keeps what it receives, for a newcomer to read.
        wait_for_condition(
            lambda: _mail_accepts(mail_port), timeout=60, message="the local relay to listen"
        )
        with smtplib.SMTP("127.0.0.1", mail_port, timeout=10) as smtp:
            smtp.sendmail("a@example.org", ["b@example.org"], b"Message-ID: <x@y>\r\n\r\nhi\r\n")
        [kept] = list(mail_dir.glob("*.eml"))
        assert b"Message-ID: <x@y>" in kept.read_bytes()

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
