"""Where the database is: DATABASE_URL when set, else an embedded PostgreSQL under var/.

Never SQLite: the product's guarantees (row locks, SKIP LOCKED, unique constraints under
concurrency, the journal's append-only trigger) are PostgreSQL's.
"""

import os
from pathlib import Path
from urllib.parse import quote


def embedded_database_url(base_dir: Path) -> str:
    # pgserver keeps one server per data directory and reference-counts the processes using it,
    # so the web server, the cluster and the test run share one instance and the last one out
    # stops it.
    os.environ.setdefault("XDG_RUNTIME_DIR", str(base_dir / "var" / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    import pgserver

    data_dir = base_dir / "var" / "pgdata"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(data_dir)
    return server.get_uri()


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
