"""The real processes a drill (and the soak) runs against: a web server and django-q2 clusters.

Each child runs in its own session, so a failpoint that SIGKILLs its process group takes down
exactly that cluster (sentinel, monitor, pusher and workers together) and nothing else, and so
stopping a child never leaves a grandchild behind.
"""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

from django.db import connection

from config.db import connection_url
from harness.processes import Child, free_port, qcluster_command, web_command


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
            # E-mail's retry window shrunk to the drill's scale: a 421 is tried again in a second.
            "EMAIL_RETRY_FIRST_SECONDS": "1",
            "EMAIL_RETRY_MAX_SECONDS": "2",
            "HANDOVER_FAILPOINTS": "",
        }
    )
    env.update(overrides)
    return env


class Cluster(Child):
    """``python manage.py qcluster`` with the drill's settings."""

    def __init__(self, log_path: Path, env: dict[str, str], *, workers=2, failpoints=()):
        env = {**env, "Q_WORKERS": str(workers), "HANDOVER_FAILPOINTS": ",".join(failpoints)}
        super().__init__("cluster", qcluster_command(), env, log_path=log_path)


class WebServer(Child):
    """The product's web server (config.serve) on a free port (the intake endpoint is HTTP)."""

    def __init__(self, log_path: Path, env: dict[str, str], *, workers=2, threads=4):
        self.port = free_port()
        command = web_command(
            f"127.0.0.1:{self.port}", "--processes", str(workers), "--threads", str(threads)
        )
        super().__init__("web", command, env, log_path=log_path)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        self.wait_answers(self.url + "/healthz", timeout=timeout, interval=0.1, error=DrillError)
