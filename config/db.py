"""Where the database is: DATABASE_URL when set, else an embedded PostgreSQL under var/.

Never SQLite: the product's guarantees (row locks, SKIP LOCKED, unique constraints under
concurrency, the journal's append-only trigger) are PostgreSQL's.
"""

import json
import os
from pathlib import Path
from urllib.parse import quote

# pgserver's own record of the processes using the server in a data directory.
HANDLES_FILE = ".handle_pids.json"


def embedded_database_url(base_dir: Path) -> str:
    # pgserver keeps one server per data directory and reference-counts the processes using it,
    # so the web server, the cluster and the test run share one instance and the last one out
    # stops it.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(base_dir / "var" / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    import pgserver
    from pgserver.postgres_server import PostgresServer

    data_dir = base_dir / "var" / "pgdata"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with PostgresServer._lock:  # the lock pgserver itself takes around that record
        forget_dead_handles(data_dir)
    server = pgserver.get_server(data_dir)
    return server.get_uri()


def _alive(pid) -> bool:
    import psutil  # pgserver's own dependency; pid_exists is right on every platform

    return isinstance(pid, int) and pid > 0 and psutil.pid_exists(pid)


def forget_dead_handles(data_dir: Path) -> list:
    """Drop the processes that no longer exist from pgserver's count of the server's users.

    A process removes itself when it exits (atexit), and the last one out stops the server. One
    killed first (SIGKILL, a timeout) stays counted for ever, and then the server never stops,
    however cleanly everything else exits. Returns the pids kept.
    """
    handles = data_dir / HANDLES_FILE
    try:
        pids = json.loads(handles.read_text())
    except (FileNotFoundError, ValueError):
        return []
    if not isinstance(pids, list):
        pids = []
    alive = [pid for pid in pids if _alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))
    return alive


def database_url(base_dir: Path) -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    url = embedded_database_url(base_dir)
    # Child processes (workers, the sandbox, test subprocesses) reuse the same server.
    os.environ["DATABASE_URL"] = url
    return url


def connection_url(settings_dict) -> str:
    """A DATABASE_URL naming the database a connection uses (a test run's own one too), for
    child processes: workers, web servers and sandboxes that tests and the drill start."""
    s = settings_dict
    auth = quote(s["USER"] or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    host = s.get("HOST") or ""
    if host.startswith("/"):  # a socket directory (the embedded server)
        netloc = f"{auth}@" + (f":{s['PORT']}" if s.get("PORT") else "")
        return f"postgresql://{netloc}/{s['NAME']}?host={quote(host, safe='')}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{s['NAME']}"
