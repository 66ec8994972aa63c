"""Test equipment: the sandbox (``sandbox/``) as a real, separate process, for tests, the drill
and the soak.

    with SandboxProcess() as sandbox:
        sandbox.start(tmp_path / "sandbox.sqlite3")
        sandbox.fault("crm.create", "timeout_after_commit", delay_ms=1500)
        ...  # point the code under test at sandbox.url
        assert sandbox.stats()["crm"]["total"] == 1

The child is ``python -m sandbox`` (no Django), its output goes to ``<data>.log`` next to the
data file. ``SandboxProcess`` is a ``harness.processes.Child`` (the one process wrapper of the
test equipment: ``stop()``, ``kill()``, ``running``, ``pid``, ``log_path`` are its), and, like
it, uses only the standard library, so this helper adds no dependency to the tests that use it.
It lives in ``harness`` so that the sandbox itself imports nothing of Handover's (product code
never imports it either).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.processes import Child, control_call, free_port, sandbox_command

PROJECT_ROOT = Path(__file__).resolve().parent.parent

STARTUP_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 10.0


class SandboxError(RuntimeError):
    """The sandbox process did not start, or a control call failed."""


class SandboxProcess(Child):
    def __init__(self, host: str = "127.0.0.1", startup_timeout: float = STARTUP_TIMEOUT_SECONDS):
        # No cwd of its own: PYTHONPATH finds the package (see _child_environment).
        super().__init__(
            "sandbox", [], cwd=None, own_session=False, stop_timeout=STOP_TIMEOUT_SECONDS
        )
        self.host = host
        self.startup_timeout = startup_timeout
        self.data_path: Path | None = None
        self.port: int | None = None
        self.token: str | None = None

    # -- lifecycle (stop(): SIGTERM, then SIGKILL if no orderly exit comes; kill(): a crash,
    # whatever the sandbox had committed must survive it) --------------------------------------

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

    def restart(self) -> None:
        """Stop (if still running) and start again on the same port, data file and token."""
        if self.data_path is None:
            raise SandboxError("restart() before start()")
        self.stop()
        self._launch()

    @property
    def url(self) -> str:
        if self.port is None:
            raise SandboxError("sandbox not started")
        return f"http://{self.host}:{self.port}"

    @property
    def auth_headers(self) -> dict[str, str]:
        """Headers a service call needs: the bearer token when one is set."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def __enter__(self) -> SandboxProcess:
        return self  # started by start(data_path), stopped on the way out

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
        self.command = sandbox_command(self.port, self.data_path, host=self.host, token=self.token)
        self.env = _child_environment()
        self.log_path = self.data_path.with_name(self.data_path.name + ".log")
        super().start()
        self.wait_answers(
            self.url + "/_sandbox/stats",
            pid_header="X-Sandbox-Pid",
            timeout=self.startup_timeout,
            error=SandboxError,
        )

    def _control(self, method: str, path: str, payload: Any = None) -> dict[str, Any]:
        return control_call(self.url, method, path, payload, error=SandboxError)


def _child_environment() -> dict[str, str]:
    env = dict(os.environ)
    # `python -m sandbox` must find this package whatever the caller's working directory.
    env["PYTHONPATH"] = os.pathsep.join(
        part for part in (str(PROJECT_ROOT), env.get("PYTHONPATH", "")) if part
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env
