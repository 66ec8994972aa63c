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


def handles_lock(lock_path: Path | None = None):
    """The inter-process lock pgserver takes around its record of the server's users.

    pgserver has no public way to edit that record, nor to take its lock; what it locks is the
    public ``PostgresServer.lock_path``, with fasteners' ``InterProcessLock`` (an fcntl lock on
    that file), so a lock of our own on the same file excludes pgserver in every other process.
    (fcntl locks are per process: take it in one thread at a time, never while pgserver's own
    is held here.) tests/foundation/test_embedded_db.py pins both facts.
    """
    import fasteners
    from pgserver.postgres_server import PostgresServer

    return fasteners.InterProcessLock(lock_path or PostgresServer.lock_path)


def embedded_database_url(base_dir: Path) -> str:
    """Start (or join) the embedded server under ``base_dir``/var/pgdata; its URL.

    Called when the first database connection is made (config/embedded/base.py), never when
    the settings are loaded.
    """
    # pgserver keeps one server per data directory and reference-counts the processes using it,
    # so the web server, the cluster and the test run share one instance and the last one out
    # stops it.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(base_dir / "var" / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    import pgserver

    data_dir = base_dir / "var" / "pgdata"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with handles_lock():
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


EMBEDDED_ENGINE = "config.embedded"


def database_settings(base_dir: Path, **options) -> dict:
    """Django's ``DATABASES["default"]``: DATABASE_URL's database, or, when it is unset, the
    embedded server's, which the ``config.embedded`` backend starts on the first connection.
    Nothing is started here: loading the settings has no side effect."""
    import dj_database_url

    url = os.environ.get("DATABASE_URL")
    if url:
        return dj_database_url.parse(url, **options)
    # Host and port are the running server's, filled in when it is started.
    return dj_database_url.parse(
        "postgresql://postgres@/postgres", engine=EMBEDDED_ENGINE, **options
    )


def connection_url(settings_dict) -> str:
    """A DATABASE_URL naming the database a connection uses (a test run's own one too), for
    child processes: workers, web servers and sandboxes that tests and the drill start."""
    s = settings_dict
    if s.get("ENGINE") == EMBEDDED_ENGINE and not s.get("HOST"):
        # No connection yet: the embedded server's address (started now if need be).
        from config.embedded.base import embedded_address

        s = {**s, **embedded_address()}
    auth = quote(s["USER"] or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    host = s.get("HOST") or ""
    if host.startswith("/"):  # a socket directory (the embedded server)
        netloc = f"{auth}@" + (f":{s['PORT']}" if s.get("PORT") else "")
        return f"postgresql://{netloc}/{s['NAME']}?host={quote(host, safe='')}"
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{s['NAME']}"
