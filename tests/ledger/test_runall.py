"""`manage.py runall` (make run): however the supervisor is stopped, nothing runs on without it.

Real processes: runall on the test database starts the django-q2 cluster and the web server
(config.serve, waitress); each test stops runall one way (SIGTERM as Ctrl-C does, SIGTERM then
SIGKILL as a supervisor does, SIGKILL alone: no handler runs, no clean-up code) and waits for
every process it had started, grandchildren included, to exit. Nothing is timed: the waits only
bound a failure.
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

GONE_WITHIN_S = 60


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


def _started_runall(tmp_path, **extra_env):
    mail_port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "PYTHONUNBUFFERED": "1",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(mail_port),
        **extra_env,
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
    runall.mail = (mail_port, mail_dir)  # where its local relay listens and keeps what it gets
    runall.port = port  # where its web server listens
    return runall, log


def _everything_it_started(runall, log):
    """runall's children and theirs, once the cluster runs (its sentinel, workers, pusher,
    monitor) and the web server serves (its two processes)."""
    _wait_for_line(log, "Handover is running on", runall)
    _wait_for_line(log, "running.", runall)  # the cluster's sentinel guards its workers
    started = runall.children(recursive=True)
    names = " ".join(" ".join(p.cmdline()) for p in runall.children())
    assert "qcluster" in names and "config.serve" in names, names
    assert len(started) >= 2 + 1 + 1 + 2, [p.cmdline() for p in started]
    return started


def _runs(process: psutil.Process) -> bool:
    """Running, and not merely a zombie waiting for its parent to read its exit status."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _assert_none_left(started, log):
    assert started
    _gone, alive = psutil.wait_procs(started, timeout=GONE_WITHIN_S)
    alive = [p for p in alive if _runs(p)]
    assert not alive, (
        f"still running without runall: {[(p.pid, p.status()) for p in alive]}\n"
        f"{log.read_text()[-3000:]}"
    )


def _kill_leftovers(runall, started):
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if runall.poll() is None:
        runall.kill()


def test_killing_runall_stops_what_it_started(tmp_path):
    runall, log = _started_runall(tmp_path)
    started = []
    try:
        started = _everything_it_started(runall, log)
        names = " ".join(" ".join(p.cmdline()) for p in runall.children())
        assert "runmailserver" in names, names
        # The local relay keeps what it receives, for a newcomer to read.
        mail_port, mail_dir = runall.mail
        wait_for_condition(
            lambda: _mail_accepts(mail_port), timeout=60, message="the local relay to listen"
        )
        with smtplib.SMTP("127.0.0.1", mail_port, timeout=10) as smtp:
            smtp.sendmail("a@example.org", ["b@example.org"], b"Message-ID: <x@y>\r\n\r\nhi\r\n")
        [kept] = list(mail_dir.glob("*.eml"))
        assert b"Message-ID: <x@y>" in kept.read_bytes()

        runall.send_signal(signal.SIGKILL)
        runall.wait(30)

        _assert_none_left(started, log)
    finally:
        _kill_leftovers(runall, started)


def test_killing_runall_with_a_task_in_hand_does_not_wait_for_it(tmp_path):
    """A cluster whose tasks would take the whole graceful stop (Q_TIMEOUT 600 s: 605 s, far
    beyond the bound of the wait below) is orphaned by SIGKILL of runall: it stops within a
    few seconds, not Q_TIMEOUT + 5 s. The task in hand is stood for by a sentinel that does
    not answer (stopped with SIGSTOP), as in tests/ledger/test_qcluster.py."""
    runall, log = _started_runall(tmp_path, Q_TIMEOUT="600", Q_RETRY="700")
    started = []
    try:
        started = _everything_it_started(runall, log)
        (master,) = [p for p in runall.children() if "qcluster" in " ".join(p.cmdline())]
        (sentinel,) = [p for p in master.children() if "qcluster" in " ".join(p.cmdline())]
        sentinel.send_signal(signal.SIGSTOP)

        runall.send_signal(signal.SIGKILL)
        runall.wait(30)

        _assert_none_left(started, log)
    finally:
        _kill_leftovers(runall, started)


def test_sigterm_stops_runall_and_each_child_stops_when_told(tmp_path):
    """Ctrl-C or SIGTERM: runall tells each child, each stops by itself (none has to be
    killed at runall's own deadline), then runall exits."""
    runall, log = _started_runall(tmp_path)
    started = []
    try:
        started = _everything_it_started(runall, log)

        runall.send_signal(signal.SIGTERM)

        assert runall.wait(GONE_WITHIN_S) == 0
        _assert_none_left(started, log)
        said = log.read_text()
        assert "Stopped." in said
        assert "workers stopped (0)." in said and "web stopped (0)." in said, said[-3000:]
        assert "did not stop within" not in said, said[-3000:]
    finally:
        _kill_leftovers(runall, started)


def test_sigterm_then_sigkill_still_stops_what_it_started(tmp_path):
    """The way a supervisor stops a service (SIGTERM, then SIGKILL before runall's own
    deadline): once runall has acted on the SIGTERM (the web server is gone), it is killed,
    and the cluster must not outlive it."""
    runall, log = _started_runall(tmp_path)
    started = []
    try:
        started = _everything_it_started(runall, log)
        (web,) = [p for p in runall.children() if "config.serve" in " ".join(p.cmdline())]

        runall.send_signal(signal.SIGTERM)
        wait_for_condition(
            lambda: not _runs(web), timeout=GONE_WITHIN_S, message="the web server to exit"
        )
        runall.send_signal(signal.SIGKILL)
        runall.wait(30)

        _assert_none_left(started, log)
    finally:
        _kill_leftovers(runall, started)


def test_the_banner_says_where_the_demo_password_came_from(tmp_path, monkeypatch, settings):
    # Issue 27, defect 11: it said "DEMO_PASSWORD in .env" when it came from the environment.
    from harness.management.commands.runall import password_source

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


def test_make_run_seeds_the_records_its_demo_names_at_its_sandbox(tmp_path):
    """runall starts its sandbox and e-mail relay before seeding, and the seed makes there every
    record the demo names: each ID on a demo CRM operation (confirmed, or found twice) answers
    200 at that sandbox, whose look-up finds the duplicate pair under its one reference, and
    the relay kept the one acknowledgement the demo names as sent."""
    import requests

    from ledger import notices
    from ledger.models import Operation

    sandbox_port = free_port()
    sandbox = f"http://127.0.0.1:{sandbox_port}"
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "PYTHONUNBUFFERED": "1",
        "SANDBOX_URL": sandbox,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(free_port()),
    }
    mail_dir = tmp_path / "mail"
    log = tmp_path / "runall.log"
    with log.open("w") as out:
        runall = psutil.Popen(
            [
                sys.executable,
                "manage.py",
                "runall",
                "--port",
                str(free_port()),
                "--sandbox-port",
                str(sandbox_port),
                "--sandbox-data",
                str(tmp_path / "sandbox.sqlite3"),
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
        crm = Operation.objects.filter(integration__name="crm", enquiry__isnull=False)
        named = set()
        for op in crm.exclude(enquiry__subject__in=("Fly-tipping", "Pothole outside school")):
            named.update(op.records_observed())
        assert len(named) == 4, named  # two confirmed by the stories, two found for one
        with requests.Session() as http:
            http.trust_env = False
            for record in named:
                answer = http.get(f"{sandbox}/crm/enquiries/{record}", timeout=10)
                assert answer.status_code == 200, (record, answer.text)
            pair = crm.get(attention="duplicate_records")
            found = http.get(
                f"{sandbox}/crm/enquiries", params={"reference": pair.enquiry.reference}, timeout=10
            ).json()["results"]
        assert sorted(r["id"] for r in found) == sorted(pair.result["duplicates"])
        # The confirmed acknowledgement was sent to make run's e-mail relay, which kept it.
        sent = Operation.objects.get(
            action="notify.send",
            state="confirmed",
            payload__template="enquiry_received",
            enquiry__subject="Broken window latch",
        )
        message_id = notices.message_id(sent.idempotency_key)
        kept = [f for f in mail_dir.glob("*.eml") if message_id in f.read_text()]
        assert len(kept) == 1, (message_id, sent.external_id)
        runall.send_signal(signal.SIGTERM)
        runall.wait(timeout=GONE_WITHIN_S)
        _assert_none_left(started, log)
    finally:
        _kill_leftovers(runall, started)


def test_make_run_tells_the_demo_people_at_once_with_links_to_the_port_it_serves(tmp_path):
    """A fresh `make run PORT=...`: the demo's people have addresses, so the notice schedule's
    first run (at the cluster's start) e-mails each person what needs them, and the local relay
    keeps the messages in var/mail; every link opens the console on the port it serves, not
    CONSOLE_URL's default."""
    import email
    import email.policy

    from django_q.models import Schedule

    # The schedule its migration makes (recovery 0006): gone if an earlier test flushed the
    # database (transaction=True), as a fresh install never is.
    Schedule.objects.get_or_create(
        name="recovery.notify_operators",
        defaults={
            "func": "recovery.tasks.notify_operators",
            "schedule_type": Schedule.MINUTES,
            "minutes": 1,
            "repeats": -1,
        },
    )
    runall, log = _started_runall(tmp_path)
    port, (_mail_port, mail_dir) = runall.port, runall.mail
    started = []

    def operator_messages():
        found = []
        for path in mail_dir.glob("*.eml"):
            message = email.message_from_bytes(path.read_bytes(), policy=email.policy.default)
            if "need you" in str(message["Subject"]):
                found.append(message)
        return found

    try:
        started = _everything_it_started(runall, log)
        # A hang guard only: the schedule's first run comes as the cluster starts.
        wait_for_condition(
            operator_messages, timeout=240, interval=1, message="an operator's notice"
        )
        for message in operator_messages():
            assert message["To"].addresses[0].domain == "council.example"
            text = message.get_body(("plain",)).get_content()
            links = [w for w in text.split() if w.startswith("http")]
            assert links, text
            assert all(w.startswith(f"http://127.0.0.1:{port}/console/") for w in links), text
        assert f"open http://127.0.0.1:{port}/ (CONSOLE_URL)" in log.read_text()
        runall.send_signal(signal.SIGTERM)
        runall.wait(timeout=GONE_WITHIN_S)
        _assert_none_left(started, log)
    finally:
        _kill_leftovers(runall, started)
