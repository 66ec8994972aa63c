"""Run the sandbox as a real, separate process from tests.

    with SandboxProcess() as sandbox:
        sandbox.start(tmp_path / "sandbox.sqlite3")
        sandbox.fault("crm.create", "timeout_after_commit", delay_ms=1500)
        ...  # point the code under test at sandbox.url
        assert sandbox.stats()["crm"]["total"] == 1

The child is ``python -m sandbox`` (no Django), its output goes to ``<data>.log`` next to the
data file. The process itself is ``harness.processes.Child`` (the one process wrapper of the test
equipment); like it, the control calls use only the standard library, so this helper adds no
dependency to the tests that use it.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness.processes import Child, free_port, wait_until

PROJECT_ROOT = Path(__file__).resolve().parent.parent

STARTUP_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 10.0
CONTROL_TIMEOUT_SECONDS = 10.0
LOG_TAIL_CHARS = 4000

# Control calls go straight to the local process, never through an environment proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SandboxError(RuntimeError):
    """The sandbox process did not start, or a control call failed."""


class SandboxProcess:
    def __init__(self, host: str = "127.0.0.1", startup_timeout: float = STARTUP_TIMEOUT_SECONDS):
        self.host = host
        self.startup_timeout = startup_timeout
        self.data_path: Path | None = None
        self.port: int | None = None
        self.token: str | None = None
        self._child: Child | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(
        self, data_path: str | os.PathLike[str], port: int | None = None, token: str | None = None
    ) -> SandboxProcess:
        """Launch the sandbox on ``port`` (a free one when None) and wait until it answers."""
        if self.running:
            raise SandboxError(f"sandbox already running at {self.url}")
        self.data_path = Path(data_path)
        self.port = port or free_port(self.host)
        self.token = token
        self._launch()
        return self

    def stop(self) -> None:
        """SIGTERM, then wait for an orderly exit (SIGKILL if it does not come)."""
        child, self._child = self._child, None
        if child is not None:
            child.stop(timeout=STOP_TIMEOUT_SECONDS)

    def kill(self) -> None:
        """SIGKILL: a crash. Whatever the sandbox had committed must survive it."""
        child, self._child = self._child, None
        if child is not None:
            child.kill()

    def restart(self) -> None:
        """Stop (if still running) and start again on the same port, data file and token."""
        if self.data_path is None:
            raise SandboxError("restart() before start()")
        self.stop()
        self._launch()

    @property
    def running(self) -> bool:
        return self._child is not None and self._child.running

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    @property
    def url(self) -> str:
        if self.port is None:
            raise SandboxError("sandbox not started")
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        if self.data_path is None:
            raise SandboxError("sandbox not started")
        return self.data_path.with_name(self.data_path.name + ".log")

    @property
    def auth_headers(self) -> dict[str, str]:
        """Headers a service call needs: the bearer token when one is set."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def __enter__(self) -> SandboxProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- control plane -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return self._control("GET", "/_sandbox/stats")

    def reset(self) -> dict[str, Any]:
        return self._control("POST", "/_sandbox/reset")

    def fault(
        self, target: str, mode: str, count: int = 1, delay_ms: int | None = None
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"target": target, "mode": mode, "count": count}
        if delay_ms is not None:
            payload["delay_ms"] = delay_ms
        return self._control("POST", "/_sandbox/faults", payload)

    def clear_faults(self) -> dict[str, Any]:
        return self._control("DELETE", "/_sandbox/faults")

    def capabilities(self, **changes: Any) -> dict[str, Any]:
        """Change the given capabilities (none: just read them); returns the full set."""
        if not changes:
            return self._control("GET", "/_sandbox/capabilities")
        return self._control("POST", "/_sandbox/capabilities", changes)

    def set_doc_access(self, doc_id: str, allowed: bool) -> dict[str, Any]:
        return self._control("POST", f"/_sandbox/docs/{doc_id}/access", {"allowed": allowed})

    # -- internals -----------------------------------------------------------------------------

    def _launch(self) -> None:
        if self.data_path is None or self.port is None:
            raise SandboxError("sandbox not started")
        command = [
            sys.executable,
            "-m",
            "sandbox",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data",
            str(self.data_path),
        ]
        if self.token:
            command += ["--token", self.token]
        self.data_path.parent.mkdir(parents=True, exist_ok=True)
        # No cwd of its own: PYTHONPATH finds the package (see _child_environment).
        env = _child_environment()
        child = Child("sandbox", command, env, self.log_path, cwd=None, own_session=False)
        self._child = child.start()
        try:
            answered = wait_until(
                self._answers_or_exited, timeout=self.startup_timeout, error=_Late
            )
        except _Late:
            self.kill()
            raise SandboxError(
                f"sandbox did not answer on {self.url} within {self.startup_timeout:.0f}s; "
                f"its output:\n{child.log_since_start(LOG_TAIL_CHARS)}"
            ) from None
        if answered == "exited":
            self._child = None
            raise SandboxError(
                f"sandbox exited with code {child.process.returncode} before answering on "
                f"{self.url}; its output:\n{child.log_since_start(LOG_TAIL_CHARS)}"
            )

    def _answers_or_exited(self) -> str | None:
        if not self.running:
            return "exited"
        # Check the responder's pid: another process may hold the port we picked.
        request = urllib.request.Request(self.url + "/_sandbox/stats")
        try:
            with _opener.open(request, timeout=1.0) as response:
                response.read()
                if response.headers.get("X-Sandbox-Pid") == str(self.pid):
                    return "answered"
        except (OSError, urllib.error.URLError):
            pass
        return None

    def _control(self, method: str, path: str, payload: Any = None) -> dict[str, Any]:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with _opener.open(request, timeout=CONTROL_TIMEOUT_SECONDS) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:  # an HTTPError holds the open response; close it
                body = exc.read().decode("utf-8", "replace")
            raise SandboxError(f"{method} {path} -> {exc.code}: {body}") from None


class _Late(Exception):
    pass


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    # `python -m sandbox` must find this package whatever the caller's working directory.
    env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if part
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env
