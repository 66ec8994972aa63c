"""config.db's embedded PostgreSQL: a process killed while using it no longer keeps it running.

pgserver counts the processes using the server (var/pgdata/.handle_pids.json) and the last one
to exit stops it. The integration test starts a real embedded server in a directory of its
own, SIGKILLs the process that started it, and checks that the next user's clean exit stops it.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from config.db import HANDLES_FILE, forget_dead_handles

ROOT = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # exited and reaped: the pid names no process now
    return child.pid


@pytest.mark.slow  # starts a process to have a dead pid
def test_dead_processes_are_forgotten_and_live_ones_kept(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    (tmp_path / HANDLES_FILE).write_text(json.dumps([dead, alive, "junk", -1]))
    assert forget_dead_handles(tmp_path) == [alive]
    assert json.loads((tmp_path / HANDLES_FILE).read_text()) == [alive]


def test_no_record_or_a_broken_one_is_left_alone(tmp_path):
    assert forget_dead_handles(tmp_path) == []
    assert not (tmp_path / HANDLES_FILE).exists()
    (tmp_path / HANDLES_FILE).write_text("{not json")
    assert forget_dead_handles(tmp_path) == []


USER = """
import sys, time
from pathlib import Path
from config.db import embedded_database_url
print(embedded_database_url(Path(sys.argv[1])), flush=True)
if sys.argv[2] == "stay":
    time.sleep(600)
"""


def _postmaster_running(pgdata: Path) -> bool:
    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return False
    try:
        os.kill(int(pidfile.read_text().split()[0]), 0)
    except (ProcessLookupError, ValueError):
        return False
    return True


@pytest.mark.slow
def test_a_killed_user_does_not_keep_the_server_running():
    base = ROOT / "var" / f"test-embedded-{uuid.uuid4().hex[:8]}"
    pgdata = base / "var" / "pgdata"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "XDG_RUNTIME_DIR")}
    command = [sys.executable, "-c", USER, str(base)]
    try:
        first = subprocess.Popen(
            [*command, "stay"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        assert first.stdout.readline().startswith("postgresql://")
        assert _postmaster_running(pgdata)
        first.send_signal(signal.SIGKILL)  # its atexit never runs: it stays counted
        first.wait(30)
        first.stdout.close()
        assert first.pid in json.loads((pgdata / HANDLES_FILE).read_text())

        second = subprocess.run(
            [*command, "leave"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 0, second.stderr
        # The last live user left cleanly, so the server stopped with it.
        assert not _postmaster_running(pgdata)
        assert json.loads((pgdata / HANDLES_FILE).read_text()) == []
    finally:
        if _postmaster_running(pgdata):
            from pgserver._commands import pg_ctl

            user = "pgserver" if os.geteuid() == 0 else None  # as pgserver runs it
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=pgdata, user=user)
        shutil.rmtree(base, ignore_errors=True)


def test_the_handles_lock_is_the_one_pgserver_takes():
    """pgserver has no public lock for its record of users (config.db.handles_lock): what it
    locks is a fasteners InterProcessLock on its public ``lock_path``. An upgrade that changes
    either fails here, before a record is edited without pgserver's lock."""
    import fasteners
    from pgserver.postgres_server import PostgresServer

    from config.db import handles_lock

    lock = handles_lock()
    assert isinstance(lock, fasteners.InterProcessLock)
    assert isinstance(PostgresServer._lock, fasteners.InterProcessLock)
    paths = {Path(os.fsdecode(held.path)) for held in (lock, PostgresServer._lock)}
    assert paths == {Path(PostgresServer.lock_path)}
