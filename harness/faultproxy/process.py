"""``FaultProxy``: the fault proxy as a child process, for tests, the drill and the soak."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.faultproxy.faults import Pattern
from harness.faultproxy.server import DEFAULT_UPSTREAM_TIMEOUT_SECONDS, Upstream, loopback_host
from harness.processes import PROJECT_ROOT, Child, control_call, free_port

STARTUP_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 10.0


class FaultProxyError(RuntimeError):
    """The proxy process did not start, or a control call failed."""


class FaultProxy(Child):
    """The fault proxy as a separate process, started on entering the ``with`` block:

    with FaultProxy(sandbox.url, targets={"crm.create": "POST /crm/enquiries"}) as proxy:
        proxy.fault("crm.create", "drop_after_forward")
        ...  # point the code under test at proxy.url
        assert proxy.stats()["targets"]["crm.create"]["forwarded"] == 1

    A ``harness.processes.Child``: ``stop()`` (SIGTERM, then SIGKILL if no orderly exit comes),
    ``kill()``, ``running``, ``pid`` and ``log_path`` are its.
    """

    def __init__(
        self,
        upstream_url: str,
        *,
        targets: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT_SECONDS,
        startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    ) -> None:
        # Refuse here, before any process exists, as the server itself would.
        self.host = loopback_host(host)
        Upstream.parse(upstream_url)
        self.targets = {name: str(Pattern.parse(text)) for name, text in (targets or {}).items()}
        # `-m harness.faultproxy` finds the package from the project root.
        super().__init__(
            "fault proxy",
            [],
            log_path=log_path,
            cwd=PROJECT_ROOT,
            own_session=False,
            stop_timeout=STOP_TIMEOUT_SECONDS,
        )
        self.upstream_url = upstream_url
        self.requested_port = port
        self.port: int | None = None
        self.upstream_timeout = upstream_timeout
        self.startup_timeout = startup_timeout

    def start(self) -> FaultProxy:
        if self.running:
            raise FaultProxyError(f"fault proxy already running at {self.url}")
        self.port = self.requested_port or free_port(self.host)
        if self.log_path is None:
            handle, name = tempfile.mkstemp(prefix="faultproxy-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)
        self.command = [
            sys.executable,
            "-m",
            "harness.faultproxy",
            "--upstream",
            self.upstream_url,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--upstream-timeout",
            str(self.upstream_timeout),
            "--parent-pid",
            str(os.getpid()),
        ]
        for name, pattern in self.targets.items():
            self.command += ["--target", f"{name}={pattern}"]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        super().start()
        return self.wait_answers(
            self.url + "/_proxy/stats",
            pid_header="X-Fault-Proxy-Pid",
            timeout=self.startup_timeout,
            error=FaultProxyError,
        )

    @property
    def url(self) -> str:
        if self.port is None:
            raise FaultProxyError("fault proxy not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- control API ---------------------------------------------------------------------------

    def fault(
        self,
        target: str,
        mode: str,
        count: int = 1,
        delay_ms: int | None = None,
        retry_after: int | str | None = None,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {"target": target, "mode": mode, "count": count}
        if delay_ms is not None:
            payload["delay_ms"] = delay_ms
        if retry_after is not None:
            payload["retry_after"] = retry_after
        return self._control("POST", "/_proxy/faults", payload)

    def clear_faults(self) -> dict[str, Any]:
        return self._control("DELETE", "/_proxy/faults")

    def faults(self) -> list[dict[str, Any]]:
        return self._control("GET", "/_proxy/faults")["faults_pending"]

    def stats(self) -> dict[str, Any]:
        return self._control("GET", "/_proxy/stats")

    def release(self) -> int:
        """End every hold now (a ``late`` request is forwarded); returns how many were held."""
        return self._control("POST", "/_proxy/release")["released"]

    def reset(self) -> dict[str, Any]:
        return self._control("POST", "/_proxy/reset")

    def _control(self, method: str, path: str, payload: Any = None) -> Any:
        return control_call(self.url, method, path, payload, error=FaultProxyError)
