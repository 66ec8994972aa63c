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

Steps 1-4 are in ``harness.bottlecrm_build``. The BottleCRM side (settings, the org/token
script) is in ``bottlecrm_site/`` and runs on BottleCRM's own Python; the harness itself uses
only the standard library, psycopg and pgserver.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.bottlecrm_build import (
    RUN_DB_PREFIX,
    SITE_DIR,
    TEMPLATE_DB,
    VERSION,
    BottleCrmError,
    Postgres,
    PrerequisiteMissing,
    bottlecrm_env,
    default_home,
    die_with_parent,
    drop_orphan_runs,
    ensure_template,
    ensure_venv,
    find_python,
    postgres_for,
    run_logged,
    say,
    tail,
)
from harness.processes import Child, free_port, wait_until

__all__ = [
    "CUSTOM_FIELD_KEY",
    "VERSION",
    "BottleCrm",
    "BottleCrmError",
    "PrerequisiteMissing",
    "default_home",
    "find_python",
    "main",
]

SETUP_SCRIPT = SITE_DIR / "handover_bottlecrm_setup.py"
CUSTOM_FIELD_KEY = "external_ref"

SETUP_TIMEOUT_SECONDS = 180
STARTUP_TIMEOUT_SECONDS = 180
STOP_TIMEOUT_SECONDS = 15
HTTP_TIMEOUT_SECONDS = 30
KEEP_RUN_LOGS_SECONDS = 3 * 24 * 3600


# Calls go straight to the local process, never through an environment proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

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
        progress: Callable[[str], None] | None = say,
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
        self._child: Child | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> BottleCrm:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> BottleCrm:
        if self._child is not None:
            raise BottleCrmError("start", f"already running at {self.url}")
        started = time.monotonic()
        self.home.mkdir(parents=True, exist_ok=True)
        python = find_python()
        venv = self._timed("venv", ensure_venv, self.home, python, self._progress)
        self._pg = self._timed("postgres", postgres_for, self.home)
        self._timed("template", ensure_template, self._pg, venv, self.home, self._progress)
        # Whoever forgets stop() (an error in a fixture, a script that returns) leaves nothing.
        atexit.register(self.stop)
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
        atexit.unregister(self.stop)
        child, self._child = self._child, None
        if child is not None:
            child.stop(timeout=STOP_TIMEOUT_SECONDS)
        database, self.database = self.database, None
        if database and self._pg is not None:
            with contextlib.suppress(Exception), self._pg.connect() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    @property
    def running(self) -> bool:
        return self._child is not None and self._child.running

    @property
    def url(self) -> str:
        if self.port is None:
            raise BottleCrmError("url", "BottleCRM not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

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
        drop_orphan_runs(self._pg)
        name = f"{RUN_DB_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self.run_dir = self.home / "runs" / name
        self.run_dir.mkdir(parents=True)
        _prune_old_runs(self.home / "runs")
        with self._pg.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}"')
        self.database = name

    def _setup_and_serve(self, venv: Path) -> None:
        assert self._pg is not None and self.run_dir is not None and self.database is not None
        env = bottlecrm_env(self._pg, self.database, self.run_dir, secrets.token_urlsafe(48))
        for attempt in range(3):
            self.port = self.requested_port or free_port()
            # gunicorn loads Django while the org and token are being made: both take seconds.
            self._launch(venv, env)
            if attempt == 0:
                self._make_org_and_token(venv, env)
            if self._wait_until_ready():
                self._progress(f"serving at {self.url} (logs: {self.run_dir})")
                return
            if self.requested_port or "already in use" not in tail(self._gunicorn_log):
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
        # Its own session: a Ctrl-C meant for the caller is not gunicorn's.
        self._child = Child(
            "bottlecrm",
            command,
            env,
            self._gunicorn_log,
            cwd=self.run_dir,
            preexec_fn=die_with_parent,
        ).start()

    def _make_org_and_token(self, venv: Path, env: dict[str, str]) -> None:
        assert self.run_dir is not None
        log = self.run_dir / "setup.log"
        command = [str(venv / "bin" / "python"), str(SETUP_SCRIPT)]
        if not self.custom_field:
            command.append("--no-custom-field")
        step = "create the org, admin and token"
        out = run_logged(
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

        def answered_or_exited():
            if not self.running:
                return "exited"
            with contextlib.suppress(OSError):
                if self.api("GET", "/api/cases/?limit=1")[0] == 200:
                    return "answered"
            return None

        try:
            ready = wait_until(
                answered_or_exited, timeout=STARTUP_TIMEOUT_SECONDS, interval=0.2, error=_Late
            )
        except _Late:
            ready = "late"
        if ready != "answered":
            child, self._child = self._child, None
            if child is not None:
                child.stop(timeout=STOP_TIMEOUT_SECONDS)
        return ready == "answered"


# -- small helpers -------------------------------------------------------------------------------


class _Late(Exception):
    pass


def _prune_old_runs(runs: Path) -> None:
    cutoff = time.time() - KEEP_RUN_LOGS_SECONDS
    for run in runs.iterdir():
        with contextlib.suppress(OSError):
            if run.stat().st_mtime < cutoff:
                shutil.rmtree(run)


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
    except KeyboardInterrupt:  # start() has already cleaned up what it made
        return 130
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
