"""Start a real BottleCRM (django-crm 1.35.0) for tests, the drill and the soak.

    with BottleCrm() as crm:             # or BottleCrm(custom_field=False)
        crm.url, crm.token               # http://127.0.0.1:<port>, "bcrm_pat_..."
        crm.create_case("R-1 ...", reference="R-1")
        assert crm.case_count("R-1") == 1

    python -m harness.bottlecrm          # one for people: prints URL and token until Ctrl-C

What it does, and what it keeps between runs (under BOTTLECRM_HOME, see ``default_home``):
1. finds Python 3.12 (BottleCRM 1.35.0 needs it; on 3.11 pip silently installs 0.9.0);
2. builds a venv once (``venv/``), pinned by ``bottlecrm-constraints.txt``;
3. starts PostgreSQL: an embedded one (pgserver, ``pgdata/``) or BOTTLECRM_DATABASE_URL;
4. migrates once into a template database (about 400 migrations, minutes), marked when done;
5. per run: clones the template, makes an org, an admin and a personal access token, serves it
   with gunicorn on a free loopback port, and at stop drops the clone.
Every step is locked against other processes doing the same at the same moment, and a failed
step says which step and shows the end of its log.

The BottleCRM side (settings, the org/token script) is in ``bottlecrm_site/`` and runs on
BottleCRM's own Python; this module uses only the standard library and psycopg.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = "1.35.0"
GUNICORN_VERSION = "27.0.1"
REQUIREMENTS = (f"django-crm=={VERSION}", f"gunicorn=={GUNICORN_VERSION}")
HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "bottlecrm-constraints.txt"
SITE_DIR = HERE / "bottlecrm_site"
SETTINGS_MODULE = "handover_bottlecrm_settings"
SETUP_SCRIPT = SITE_DIR / "handover_bottlecrm_setup.py"

CUSTOM_FIELD_KEY = "external_ref"
TEMPLATE_DB = "bottlecrm_" + VERSION.replace(".", "_") + "_template"
RUN_DB_PREFIX = "bottlecrm_run_"
# Written on the template database only after its migrations all ran; without it the template
# is a leftover of an interrupted migrate and is rebuilt.
TEMPLATE_MARK = f"handover harness: django-crm=={VERSION} fully migrated"

VENV_TIMEOUT_SECONDS = 900
MIGRATE_TIMEOUT_SECONDS = 1800
SETUP_TIMEOUT_SECONDS = 180
STARTUP_TIMEOUT_SECONDS = 180
STOP_TIMEOUT_SECONDS = 15
HTTP_TIMEOUT_SECONDS = 30
LOG_TAIL_CHARS = 3000
KEEP_RUN_LOGS_SECONDS = 3 * 24 * 3600

# Calls go straight to the local process, never through an environment proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class BottleCrmError(RuntimeError):
    """A step of starting BottleCRM failed; ``step`` names it."""

    def __init__(self, step: str, message: str, log: Path | None = None):
        self.step = step
        self.log = log
        text = f"BottleCRM harness, step '{step}': {message}"
        if log is not None:
            text += f"\n--- end of {log} ---\n{_tail(log)}"
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


def _say(message: str) -> None:
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


def ensure_venv(home: Path, python: Path, progress: Callable[[str], None] = _say) -> Path:
    """The venv with BottleCRM, built once (under a lock) and reused while its pins hold."""
    venv = home / "venv"
    marker = venv / ".handover-ready"
    fingerprint = _venv_fingerprint(python)
    if _read(marker) == fingerprint:
        return venv
    with _file_lock(home / "venv.lock", "building BottleCRM's venv", progress):
        if _read(marker) == fingerprint:  # another process built it while we waited
            return venv
        log = home / "logs" / "venv.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        progress(f"building the venv {venv} with {python} (about a minute; log: {log})")
        shutil.rmtree(venv, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_PYTHON_VARS}
        step = "build BottleCRM's venv"
        _run_logged([str(python), "-m", "venv", str(venv)], log, step, env, VENV_TIMEOUT_SECONDS)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-input"]
        pip += ["--constraint", str(CONSTRAINTS), *REQUIREMENTS]
        try:
            _run_logged(pip, log, step, env, VENV_TIMEOUT_SECONDS)
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
        from pgserver.postgres_server import PostgresServer
    except ImportError as exc:
        raise PrerequisiteMissing(
            "start PostgreSQL",
            f"pgserver is not installed ({exc}); install requirements.txt or set "
            "BOTTLECRM_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres",
        ) from exc
    data = home / "pgdata"
    home.mkdir(parents=True, exist_ok=True)
    with PostgresServer._lock:  # the lock pgserver itself takes around its record of users
        _forget_dead_handles(data)
    try:
        server = pgserver.get_server(data)
    except Exception as exc:
        log = data / "log"
        raise BottleCrmError(
            "start PostgreSQL", f"pgserver could not start on {data}: {exc}", log
        ) from exc
    return Postgres.from_url(server.get_uri())


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
    alive = [pid for pid in pids if isinstance(pid, int) and pid > 0 and _pid_alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
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
    pg: Postgres, venv: Path, home: Path, progress: Callable[[str], None] = _say
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
    with _file_lock(home / f"template-{target}.lock", "migrating the template", progress):
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
        env = _bottlecrm_env(pg, TEMPLATE_DB, log.parent, secrets.token_urlsafe(48))
        command = [str(venv / "bin" / "django-admin"), "migrate", "--noinput"]
        _run_logged(command, log, step, env, MIGRATE_TIMEOUT_SECONDS, cwd=log.parent)
        with pg.connect() as conn:
            # Nobody connects to the template again, so a clone never finds it busy.
            conn.execute(f'ALTER DATABASE "{TEMPLATE_DB}" WITH ALLOW_CONNECTIONS false')
            conn.execute(f"COMMENT ON DATABASE \"{TEMPLATE_DB}\" IS '{TEMPLATE_MARK}'")


def _drop_orphan_runs(pg: Postgres) -> None:
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
            if match and not _pid_alive(int(match.group(1))):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _bottlecrm_env(pg: Postgres, dbname: str, log_dir: Path, secret_key: str) -> dict[str, str]:
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


# -- one BottleCRM -------------------------------------------------------------------------------


class BottleCrm:
    """A running BottleCRM with its own database, org and token; stop() removes the database."""

    def __init__(
        self,
        *,
        custom_field: bool = True,
        home: str | os.PathLike[str] | None = None,
        port: int | None = None,
        workers: int = 2,
        threads: int = 4,
        request_timeout: int = 30,
        progress: Callable[[str], None] | None = _say,
    ):
        """``request_timeout`` is gunicorn's: how long a request may run before its worker is
        killed (a settle delay must cover it). ``progress=None`` keeps quiet."""
        self.custom_field = custom_field
        self.home = Path(home) if home else default_home()
        self.requested_port = port
        self.workers = workers
        self.threads = threads
        self.request_timeout = request_timeout
        self._progress = progress or (lambda message: None)
        self.port: int | None = None
        self.token: str | None = None
        self.org_id: str | None = None
        self.database: str | None = None
        self.run_dir: Path | None = None
        self.timings: dict[str, float] = {}
        self._pg: Postgres | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> BottleCrm:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> BottleCrm:
        if self._process is not None:
            raise BottleCrmError("start", f"already running at {self.url}")
        started = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        python = find_python()
        venv = self._timed("venv", ensure_venv, self.home, python, self._progress)
        self._pg = self._timed("postgres", postgres_for, self.home)
        self._timed("template", ensure_template, self._pg, venv, self.home, self._progress)
        try:
            self._timed("clone", self._clone)
            self._timed("serve", self._setup_and_serve, venv)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = round(time.monotonic() - started, 1)
        return self

    def stop(self) -> None:
        """Stop gunicorn (SIGTERM, then SIGKILL) and drop the run's database. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            _terminate(process)
        database, self.database = self.database, None
        if database and self._pg is not None:
            with contextlib.suppress(Exception), self._pg.connect() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def url(self) -> str:
        if self.port is None:
            raise BottleCrmError("url", "BottleCRM not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    # -- helpers for tests ---------------------------------------------------------------------

    def api(
        self, method: str, path: str, payload: Any = None, *, token: str | None = None
    ) -> tuple[int, Any]:
        """One call to BottleCRM's API with the run's token (or ``token``): (status, JSON)."""
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        headers = {"Authorization": f"Bearer {token or self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with _opener.open(request, timeout=HTTP_TIMEOUT_SECONDS) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                status, body = exc.code, exc.read()
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body.decode("utf-8", "replace")

    def create_case(self, name: str, *, reference: str | None = None, **fields: Any) -> dict:
        """POST /api/cases/ as Handover's BottleCRM kind would; returns BottleCRM's answer."""
        payload = {"name": name, "status": "New", "priority": "Normal", "case_type": "Question"}
        if reference is not None:
            payload["custom_fields"] = {CUSTOM_FIELD_KEY: reference}
        payload.update(fields)
        return self._expect(200, "POST", "/api/cases/", payload)

    def cases(self, reference: str) -> list[dict]:
        """The cases whose custom field external_ref is exactly ``reference`` (deleted and
        merged ones too), as Handover's look-up asks."""
        return self._list(reference)["cases"]

    def case_count(self, reference: str) -> int:
        return self._list(reference)["cases_count"]

    def get_case(self, case_id: str) -> dict | None:
        """The case (``cases_obj``), or None when BottleCRM answers 404."""
        status, body = self.api("GET", f"/api/cases/{case_id}/")
        if status == 404:
            return None
        if status != 200:
            raise BottleCrmError("get_case", f"GET /api/cases/{case_id}/ -> {status}: {body}")
        return body["cases_obj"]

    def count_all_cases(self) -> int:
        """Every case of the run's org, deleted and merged ones included."""
        body = self._expect(200, "GET", "/api/cases/?include_deleted=true&show_merged=true&limit=1")
        return body["cases_count"]

    def _list(self, reference: str) -> dict:
        query = urllib.parse.urlencode(
            {
                f"cf_{CUSTOM_FIELD_KEY}": reference,
                "include_deleted": "true",
                "show_merged": "true",
                "limit": "100",
            }
        )
        return self._expect(200, "GET", f"/api/cases/?{query}")

    def _expect(self, expected: int, method: str, path: str, payload: Any = None) -> Any:
        status, body = self.api(method, path, payload)
        if status != expected:
            raise BottleCrmError("api", f"{method} {path} -> {status}: {str(body)[:500]}")
        return body

    # -- internals -----------------------------------------------------------------------------

    def _timed(self, name: str, function: Callable[..., Any], *args: Any) -> Any:
        began = time.monotonic()
        try:
            return function(*args)
        finally:
            self.timings[name] = round(time.monotonic() - began, 1)

    def _clone(self) -> None:
        assert self._pg is not None
        _drop_orphan_runs(self._pg)
        name = f"{RUN_DB_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self.run_dir = self.home / "runs" / name
        self.run_dir.mkdir(parents=True)
        _prune_old_runs(self.home / "runs")
        with self._pg.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
        self.database = name

    def _setup_and_serve(self, venv: Path) -> None:
        assert self._pg is not None and self.run_dir is not None and self.database is not None
        env = _bottlecrm_env(self._pg, self.database, self.run_dir, secrets.token_urlsafe(48))
        for attempt in range(3):
            self.port = self.requested_port or _free_port()
            # gunicorn loads Django while the org and token are being made: both take seconds.
            self._launch(venv, env)
            if attempt == 0:
                self._make_org_and_token(venv, env)
            if self._wait_until_ready():
                self._progress(f"serving at {self.url} (logs: {self.run_dir})")
                return
            if self.requested_port or "already in use" not in _tail(self._gunicorn_log):
                break
            self._progress(f"port {self.port} was taken; trying another")
        raise BottleCrmError(
            "start gunicorn",
            f"BottleCRM did not answer a token-authenticated request on {self.url}",
            self._gunicorn_log,
        )

    @property
    def _gunicorn_log(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / "gunicorn.log"

    def _launch(self, venv: Path, env: dict[str, str]) -> None:
        assert self.run_dir is not None
        command = [
            str(venv / "bin" / "gunicorn"),
            "crm.wsgi:application",
            f"--bind=127.0.0.1:{self.port}",
            f"--workers={self.workers}",
            f"--threads={self.threads}",
            f"--timeout={self.request_timeout}",
            "--graceful-timeout=2",
            # gunicorn 27 otherwise opens ~/.gunicorn/gunicorn.ctl, one path for every instance.
            "--no-control-socket",
            f"--access-logfile={self.run_dir / 'access.log'}",
        ]
        with open(self._gunicorn_log, "ab") as log:
            self._process = subprocess.Popen(
                command,
                cwd=self.run_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for the caller is not gunicorn's
            )

    def _make_org_and_token(self, venv: Path, env: dict[str, str]) -> None:
        assert self.run_dir is not None
        log = self.run_dir / "setup.log"
        command = [str(venv / "bin" / "python"), str(SETUP_SCRIPT)]
        if not self.custom_field:
            command.append("--no-custom-field")
        step = "create the org, admin and token"
        out = _run_logged(
            command, log, step, env, SETUP_TIMEOUT_SECONDS, cwd=self.run_dir, capture=True
        )
        try:
            made = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise BottleCrmError(step, f"unexpected output {out[-500:]!r}", log) from exc
        self.token, self.org_id = made["token"], made["org_id"]

    def _wait_until_ready(self) -> bool:
        """True once the run's token lists cases: the answer is from our BottleCRM and database,
        not from whatever else may hold the port."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                self._process = None
                return False
            with contextlib.suppress(OSError):
                if self.api("GET", "/api/cases/?limit=1")[0] == 200:
                    return True
            time.sleep(0.2)
        _terminate(self._process)
        self._process = None
        return False


# -- small helpers -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()


def _run_logged(
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
def _file_lock(path: Path, doing: str, progress: Callable[[str], None]) -> Iterator[None]:
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


def _prune_old_runs(runs: Path) -> None:
    cutoff = time.time() - KEEP_RUN_LOGS_SECONDS
    for run in runs.iterdir():
        with contextlib.suppress(OSError):
            if run.stat().st_mtime < cutoff:
                shutil.rmtree(run)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _tail(path: Path) -> str:
    try:
        text = path.read_bytes()[-LOG_TAIL_CHARS:].decode("utf-8", "replace")
    except OSError as exc:
        return f"(no log: {exc})"
    return text or "(empty)"


# -- for people ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.bottlecrm",
        description=f"Start a real BottleCRM {VERSION} (with its own database, org and token) "
        "and keep it running until Ctrl-C.",
    )
    parser.add_argument("--port", type=int, help="a fixed port (default: a free one)")
    parser.add_argument(
        "--no-custom-field",
        action="store_true",
        help=f"leave out the Case custom field {CUSTOM_FIELD_KEY} (to see what happens without)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=30, help="gunicorn's request timeout (s)")
    args = parser.parse_args(argv)
    # SIGTERM stops it in order too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    crm = BottleCrm(
        custom_field=not args.no_custom_field,
        port=args.port,
        workers=args.workers,
        request_timeout=args.timeout,
    )
    try:
        crm.start()
    except BottleCrmError as exc:
        print(exc, file=sys.stderr)
        return 1
    try:
        print(f"BottleCRM {VERSION} at {crm.url}")
        print(f"token:     {crm.token}")
        print(f"org:       {crm.org_id}")
        print(f"database:  {crm.database} (dropped at exit)")
        print(f"logs:      {crm.run_dir}")
        print(f"set-up:    {crm.timings}")
        print()
        print(f"CRM_KIND=bottlecrm CRM_BASE_URL={crm.url} CRM_TOKEN={crm.token}")
        print(f"curl -H 'Authorization: Bearer {crm.token}' '{crm.url}/api/cases/?limit=5'")
        print("Ctrl-C stops it.", flush=True)
        while crm.running:
            time.sleep(0.5)
        print(f"gunicorn exited; see {crm.run_dir}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        crm.stop()


if __name__ == "__main__":
    sys.exit(main())
