"""The soak's database server: its own (pgserver), or one named by --database-url; either can
be restarted mid-run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.soak_common import ROOT, log


class OwnPostgres:
    """A pgserver instance of our own: restarting it disturbs nobody else."""

    def __init__(self, directory: Path):
        os.environ.setdefault("XDG_RUNTIME_DIR", str(ROOT / "var" / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        import pgserver

        self.pgdata = directory / "pgdata"
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        # We stop it ourselves (stop()): after a restart pgserver's own clean-up no longer
        # recognises the postmaster and would leave it running.
        self.server = pgserver.get_server(self.pgdata, cleanup_mode=None)

    def stop(self):
        """Stop the server and remove its throwaway data directory (the soak's logs stay)."""
        from pgserver._commands import pg_ctl

        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user)
        except (subprocess.SubprocessError, OSError) as exc:
            log(f"could not stop the soak's PostgreSQL: {exc}")
            return
        shutil.rmtree(self.pgdata, ignore_errors=True)

    def url(self, name: str) -> str:
        self.server.psql(f'CREATE DATABASE "{name}";')
        return self.server.get_uri(name)

    def restart(self) -> tuple[bool, str]:
        from pgserver._commands import pg_ctl

        try:
            pg_ctl(
                ["-w", "-m", "fast", "-t", "60", "-l", str(self.server.log), "restart"],
                pgdata=self.pgdata,
                user=self.server.system_user,
                timeout=90,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            return False, f"pg_ctl restart failed: {exc}"
        return True, f"pg_ctl -D {self.pgdata} restart -m fast"


class ExternalPostgres:
    """A server named by --database-url: a fresh database on it; restart via pg_ctlcluster."""

    def __init__(self, url: str):
        import psycopg

        self.base = url
        self.psycopg = psycopg

    def _with(self, name: str) -> str:
        return urlunsplit(urlsplit(self.base)._replace(path="/" + name))

    def url(self, name: str) -> str:
        with self.psycopg.connect(self._with("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self._with(name)

    def stop(self):
        pass  # not ours to stop; the soak's database stays for inspection

    def restart(self) -> tuple[bool, str]:
        host = urlsplit(self.base).hostname or ""
        if host not in ("", "localhost", "127.0.0.1", "::1"):
            return False, f"{host} is not this machine: a soak cannot restart it"
        if not shutil.which("pg_lsclusters") or not shutil.which("pg_ctlcluster"):
            return False, "pg_ctlcluster is not installed (not a Debian-style PostgreSQL)"
        try:
            line = (
                subprocess.run(
                    ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True
                )
                .stdout.split("\n")[0]
                .split()
            )
            version, cluster = line[0], line[1]
            subprocess.run(
                ["pg_ctlcluster", version, cluster, "restart", "-m", "fast"],
                check=True,
                capture_output=True,
                timeout=90,
            )
        except (subprocess.SubprocessError, OSError, IndexError) as exc:
            return False, f"pg_ctlcluster restart failed: {exc}"
        return True, f"pg_ctlcluster {version} {cluster} restart -m fast"
