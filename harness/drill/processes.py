"""The real processes a drill (and the soak) runs against: a web server and django-q2 clusters.

Each child runs in its own session, so a failpoint that SIGKILLs its process group takes down
exactly that cluster (sentinel, monitor, pusher and workers together) and nothing else, and so
stopping a child never leaves a grandchild behind.
"""

from __future__ import annotations

import base64
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests
from django.conf import settings
from django.db import connection

from config.db import connection_url
from sandbox.testing import free_port

PROJECT_ROOT = Path(settings.BASE_DIR)


class DrillError(RuntimeError):
    """A process the drill needs did not start or answer in time."""


def new_secret() -> str:
    """A Standard Webhooks secret (``whsec_`` + base64 of 24 random bytes)."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def database_url_for_children() -> str:
    """DATABASE_URL naming the database this process is connected to (a test's own one too)."""
    return connection_url(connection.settings_dict)


def child_environment(**overrides: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": database_url_for_children(),
            "PYTHONUNBUFFERED": "1",
            # Workers: connector timeout < cluster timeout < retry (config/checks.py), fast polls.
            "CONNECTOR_TIMEOUT_SECONDS": "1",
            "Q_TIMEOUT": "8",
            "Q_RETRY": "10",
            "Q_POLL": "0.05",
            "HANDOVER_FAILPOINTS": "",
        }
    )
    env.update(overrides)
    return env


class Child:
    """One child process in its own session, its output appended to ``log_path``."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log_path: Path):
        self.name = name
        self.command = command
        self.env = env
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> Child:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=PROJECT_ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def log(self, tail: int | None = 3000) -> str:
        """The end of the child's output (all of it with ``tail=None``)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text if tail is None else text[-tail:]

    def wait_exit(self, timeout: float) -> int | None:
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL the whole group: a machine losing power."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait()

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (the cluster stops its workers in order), then SIGKILL whatever is left."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()


class Cluster(Child):
    """``python manage.py qcluster`` with the drill's settings."""

    def __init__(self, log_path: Path, env: dict[str, str], *, workers=2, failpoints=()):
        env = {**env, "Q_WORKERS": str(workers), "HANDOVER_FAILPOINTS": ",".join(failpoints)}
        super().__init__(
            "cluster", [sys.executable, "manage.py", "qcluster"], env, log_path=log_path
        )


class WebServer(Child):
    """gunicorn serving the real WSGI application on a free port (the intake endpoint is HTTP)."""

    def __init__(self, log_path: Path, env: dict[str, str], *, workers=2, threads=4):
        self.port = free_port()
        command = [
            sys.executable,
            "-m",
            "gunicorn",
            "config.wsgi:application",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--timeout",
            "60",
        ]
        super().__init__("web", command, env, log_path=log_path)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with requests.Session() as session:
            session.trust_env = False
            while time.monotonic() < deadline:
                if not self.running:
                    raise DrillError(f"the web server exited; its log:\n{self.log()}")
                try:
                    session.get(self.url + "/healthz", timeout=2)
                    return
                except requests.RequestException:
                    time.sleep(0.1)
        raise DrillError(f"the web server did not answer within {timeout:g}s:\n{self.log()}")
