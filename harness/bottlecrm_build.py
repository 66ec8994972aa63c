"""What a BottleCRM for tests is built from, made once and kept between runs.

Python 3.12, a venv with django-crm, a PostgreSQL server and a migrated template database, each
found or made by one function here, under a lock so that two processes starting at once build
once, and each failure naming its step with the end of its log. ``harness.bottlecrm`` uses
them to start one BottleCRM; see its docstring and docs/sandbox.md.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# preexec_fn of every child here: it gets SIGTERM when the thread that started it dies, even by
# SIGKILL, so a killed test run leaves nothing running (a migrate, a gunicorn).
from config.db import handles_lock
from config.lifetime import die_with_parent

VERSION = "1.35.0"
GUNICORN_VERSION = "27.0.1"
REQUIREMENTS = (f"django-crm=={VERSION}", f"gunicorn=={GUNICORN_VERSION}")
HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "bottlecrm-constraints.txt"
# Modules that run on BottleCRM's Python: its settings and the org/token script.
SITE_DIR = HERE / "bottlecrm_site"
SETTINGS_MODULE = "handover_bottlecrm_settings"

TEMPLATE_DB = "bottlecrm_" + VERSION.replace(".", "_") + "_template"
RUN_DB_PREFIX = "bottlecrm_run_"
# Written on the template database only after its migrations all ran; without it the template
# is a leftover of an interrupted migrate and is rebuilt.
TEMPLATE_MARK = f"handover harness: django-crm=={VERSION} fully migrated"

VENV_TIMEOUT_SECONDS = 900
MIGRATE_TIMEOUT_SECONDS = 1800
LOG_TAIL_CHARS = 3000


class BottleCrmError(RuntimeError):
    """A step of starting BottleCRM failed; ``step`` names it."""

    def __init__(self, step: str, message: str, log: Path | None = None):
        self.step = step
        self.log = log
        text = f"BottleCRM harness, step '{step}': {message}"
        if log is not None:
            text += f"\n--- end of {log} ---\n{tail(log)}"
        super().__init__(text)


class PrerequisiteMissing(BottleCrmError):
    """Something the machine must provide is missing (Python 3.12, a package index)."""


def default_home() -> Path:
    """Where the venv, the embedded PostgreSQL and the run logs live, outside the repository.

    BOTTLECRM_HOME when set. As root, /var/cache/handover/bottlecrm-<v>: pgserver runs PostgreSQL
    as a separate system user and widens every parent of its data directory to o+rx, which under
    ~/.cache would open up /root. Otherwise $XDG_CACHE_HOME (~/.cache)/handover/bottlecrm-<v>.
    """
    configured = os.environ.get("BOTTLECRM_HOME")
    if configured:
        return Path(configured).expanduser().resolve()
    if os.geteuid() == 0:
        return Path("/var/cache/handover") / f"bottlecrm-{VERSION}"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "handover" / f"bottlecrm-{VERSION}"


def say(message: str) -> None:
    print(f"bottlecrm: {message}", file=sys.stderr, flush=True)


# -- Python 3.12 and the venv ------------------------------------------------------------------


def _python_version(python: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return tuple(int(part) for part in out.strip().split("."))


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def find_python() -> Path:
    """BOTTLECRM_PYTHON, else the newest pyenv 3.12.x, else python3.12 on PATH."""
    override = os.environ.get("BOTTLECRM_PYTHON")
    if override:
        found = _python_version(override)
        if found is None or found[:2] != (3, 12):
            raise PrerequisiteMissing(
                "find Python 3.12",
                f"BOTTLECRM_PYTHON={override} is "
                + ("not a runnable Python" if found is None else "Python " + _dotted(found))
                + f"; BottleCRM {VERSION} needs Python 3.12.",
            )
        return Path(override)
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    pattern = str(pyenv_root / "versions" / "3.12.*" / "bin" / "python")

    def patch_level(path: str) -> int:
        match = re.search(r"/3\.12\.(\d+)/", path)
        return int(match.group(1)) if match else -1

    candidates = sorted(glob.glob(pattern), key=patch_level, reverse=True)
    on_path = shutil.which("python3.12")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        found = _python_version(candidate)
        if found is not None and found[:2] == (3, 12):
            return Path(candidate)
    raise PrerequisiteMissing(
        "find Python 3.12",
        f"BottleCRM {VERSION} needs Python 3.12 and none was found (looked at BOTTLECRM_PYTHON, "
        f"{pattern}, python3.12 on PATH). Install one (`pyenv install 3.12`) or set "
        "BOTTLECRM_PYTHON to its interpreter.",
    )


def _venv_fingerprint(python: Path) -> str:
    version = _python_version(str(python))
    digest = hashlib.sha256()
    digest.update(repr((REQUIREMENTS, version)).encode())
    digest.update(CONSTRAINTS.read_bytes())
    return digest.hexdigest()


def ensure_venv(home: Path, python: Path, progress: Callable[[str], None] = say) -> Path:
    """The venv with BottleCRM, built once (under a lock) and reused while its pins hold."""
    venv = home / "venv"
    marker = venv / ".handover-ready"
    fingerprint = _venv_fingerprint(python)
    if read_text(marker) == fingerprint:
        return venv
    with file_lock(home / "venv.lock", "building BottleCRM's venv", progress):
        if read_text(marker) == fingerprint:  # another process built it while we waited
            return venv
        log = home / "logs" / "venv.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        progress(f"building the venv {venv} with {python} (minutes; log: {log})")
        shutil.rmtree(venv, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_PYTHON_VARS}
        step = "build BottleCRM's venv"
        run_logged([str(python), "-m", "venv", str(venv)], log, step, env, VENV_TIMEOUT_SECONDS)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-input"]
        pip += ["--constraint", str(CONSTRAINTS), *REQUIREMENTS]
        try:
            run_logged(pip, log, step, env, VENV_TIMEOUT_SECONDS)
        except BottleCrmError as exc:
            raise PrerequisiteMissing(
                step, f"pip could not install {' '.join(REQUIREMENTS)} (no package index?)", log
            ) from exc
        # crm/settings.py calls load_dotenv(), which walks up from site-packages to the first
        # .env it finds: without this one it could read Handover's own .env.
        (venv / ".env").write_text("")
        marker.write_text(fingerprint)
    return venv


# Variables of the calling Python that must not leak into another interpreter.
_FOREIGN_PYTHON_VARS = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"}
# All BottleCRM's own processes get from the caller's environment: crm.settings reads dozens of
# variables (DEBUG, SECRET_KEY, ALLOWED_HOSTS, EMAIL_BACKEND, ...) that Handover's may also set.
_PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "SSL_CERT_FILE")


# -- PostgreSQL ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Postgres:
    """Where BottleCRM's databases live: a host or a socket directory, and a superuser."""

    host: str
    port: str
    user: str
    password: str
    maintenance_db: str

    @classmethod
    def from_url(cls, url: str) -> Postgres:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("postgres", "postgresql"):
            raise BottleCrmError("start PostgreSQL", f"not a postgresql:// URL: {url!r}")
        query = urllib.parse.parse_qs(parts.query)
        host = parts.hostname or (query.get("host") or [""])[0]
        if not host:
            raise BottleCrmError("start PostgreSQL", f"no host in {url!r}")
        return cls(
            host=urllib.parse.unquote(host),
            port=str(parts.port or (query.get("port") or ["5432"])[0]),
            user=urllib.parse.unquote(parts.username or "postgres"),
            password=urllib.parse.unquote(parts.password or ""),
            maintenance_db=parts.path.lstrip("/") or "postgres",
        )

    @property
    def local(self) -> bool:
        """On this machine, so a run database named after a dead pid is an orphan."""
        return self.host.startswith("/") or self.host in ("127.0.0.1", "localhost", "::1")

    def connect(self, dbname: str | None = None):
        import psycopg

        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=dbname or self.maintenance_db,
            autocommit=True,
            connect_timeout=10,
        )

    def child_env(self, dbname: str) -> dict[str, str]:
        """crm.settings' names for the database."""
        return {
            "DBHOST": self.host,
            "DBPORT": self.port,
            "DBUSER": self.user,
            "DBPASSWORD": self.password,
            "DBNAME": dbname,
        }


def embedded_postgres(home: Path) -> Postgres:
    """pgserver's PostgreSQL on ``home/pgdata`` (a unix socket, no TCP port)."""
    # pgserver picks its lock and socket directories when imported; give it a directory of
    # ours rather than /tmp/runtime-<uid> with a warning (Handover's config.db does the same).
    os.environ.setdefault("XDG_RUNTIME_DIR", str(home / "run"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        import pgserver
    except ImportError as exc:
        raise PrerequisiteMissing(
            "start PostgreSQL",
            f"pgserver is not installed ({exc}); install requirements.txt or set "
            "BOTTLECRM_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres",
        ) from exc
    data = home / "pgdata"
    home.mkdir(parents=True, exist_ok=True)
    with handles_lock():  # what pgserver itself locks around its record of users
        _forget_dead_handles(data)
    try:
        server = pgserver.get_server(data)
    except Exception as exc:
        log = data / "log"
        raise BottleCrmError(
            "start PostgreSQL", f"pgserver could not start on {data}: {exc}", log
        ) from exc
    if data not in _forgetting_at_exit:
        # Registered after pgserver's own exit handler, so it runs first: a process killed while
        # this one ran must not keep the server alive after this one, the last user, is gone.
        _forgetting_at_exit.add(data)
        atexit.register(_forget_dead_handles_locked, data)
    return Postgres.from_url(server.get_uri())


_forgetting_at_exit: set[Path] = set()


def _forget_dead_handles_locked(data: Path) -> None:
    with handles_lock():
        _forget_dead_handles(data)


def _forget_dead_handles(data: Path) -> None:
    # pgserver counts the processes using its server and the last one out stops it; a process
    # killed first stays counted for ever and the server would never stop.
    handles = data / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (FileNotFoundError, ValueError):
        return
    if not isinstance(pids, list):
        pids = []
    alive = [pid for pid in pids if isinstance(pid, int) and pid > 0 and pid_alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def postgres_for(home: Path) -> Postgres:
    url = os.environ.get("BOTTLECRM_DATABASE_URL")
    if url:
        return Postgres.from_url(url)
    return embedded_postgres(home)


def _template_ready(pg: Postgres) -> bool:
    with pg.connect() as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            (TEMPLATE_DB,),
        ).fetchone()
    return row is not None and row[0] == TEMPLATE_MARK


def ensure_template(
    pg: Postgres, venv: Path, home: Path, progress: Callable[[str], None] = say
) -> None:
    """The migrated template database, migrated once (under a lock) and marked when complete."""
    step = "migrate the template database"
    try:
        if _template_ready(pg):
            return
    except Exception as exc:
        raise BottleCrmError(
            "start PostgreSQL", f"cannot reach {pg.host}:{pg.port}: {exc}"
        ) from exc
    target = hashlib.sha256(f"{pg.host}:{pg.port}".encode()).hexdigest()[:12]
    with file_lock(home / f"template-{target}.lock", "migrating the template", progress):
        if _template_ready(pg):
            return
        log = home / "logs" / f"migrate-{target}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        progress(f"migrating {TEMPLATE_DB} (about 400 migrations, minutes; log: {log})")
        with pg.connect() as conn:
            # A template without the mark is what an interrupted migrate left: start again.
            conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{TEMPLATE_DB}"')
        env = bottlecrm_env(pg, TEMPLATE_DB, log.parent, secrets.token_urlsafe(48))
        command = [str(venv / "bin" / "django-admin"), "migrate", "--noinput"]
        run_logged(command, log, step, env, MIGRATE_TIMEOUT_SECONDS, cwd=log.parent)
        with pg.connect() as conn:
            # Nobody connects to the template again, so a clone never finds it busy.
            conn.execute(f'ALTER DATABASE "{TEMPLATE_DB}" WITH ALLOW_CONNECTIONS false')
            conn.execute(f"COMMENT ON DATABASE \"{TEMPLATE_DB}\" IS '{TEMPLATE_MARK}'")


def drop_orphan_runs(pg: Postgres) -> None:
    if not pg.local:
        return
    with pg.connect() as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s",
                (RUN_DB_PREFIX + "%",),
            )
        ]
        for name in names:
            match = re.fullmatch(RUN_DB_PREFIX + r"(\d+)_[0-9a-f]+", name)
            if match and not pid_alive(int(match.group(1))):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def bottlecrm_env(pg: Postgres, dbname: str, log_dir: Path, secret_key: str) -> dict[str, str]:
    env = {key: os.environ[key] for key in _PASSED_THROUGH if key in os.environ}
    env.update(pg.child_env(dbname))
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
            "PYTHONPATH": str(SITE_DIR),
            "PYTHONUNBUFFERED": "1",
            "ENV_TYPE": "dev",
            "SECRET_KEY": secret_key,
            "BOTTLECRM_LOG_DIR": str(log_dir),
        }
    )
    return env


def run_logged(
    command: list[str],
    log: Path,
    step: str,
    env: dict[str, str],
    timeout: float,
    cwd: Path | None = None,
    capture: bool = False,
) -> str:
    """Run to completion with its output appended to ``log`` as it comes (stdout returned
    instead when ``capture``, and logged at the end)."""
    with open(log, "ab") as sink:
        sink.write(f"$ {' '.join(command)}\n".encode())
        sink.flush()
        try:
            done = subprocess.run(
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
                stdout=subprocess.PIPE if capture else sink,
                stderr=sink,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise BottleCrmError(step, f"still running after {timeout:.0f}s", log) from exc
        except OSError as exc:
            raise BottleCrmError(step, f"cannot run {command[0]}: {exc}", log) from exc
        if capture:
            sink.write(done.stdout)
    if done.returncode != 0:
        raise BottleCrmError(step, f"{Path(command[0]).name} exited with {done.returncode}", log)
    return (done.stdout or b"").decode("utf-8", "replace")


@contextlib.contextmanager
def file_lock(path: Path, doing: str, progress: Callable[[str], None]) -> Iterator[None]:
    """An exclusive lock between processes (released by the kernel if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another process {doing} ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def tail(path: Path) -> str:
    try:
        text = path.read_bytes()[-LOG_TAIL_CHARS:].decode("utf-8", "replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return text or "(empty)"
