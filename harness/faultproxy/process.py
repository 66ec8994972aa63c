"""``FaultProxy``: the fault proxy as a child process, for tests, the drill and the soak."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from harness.faultproxy.faults import Pattern
from harness.faultproxy.server import DEFAULT_UPSTREAM_TIMEOUT_SECONDS, Upstream, loopback_host
from harness.processes import PROJECT_ROOT, Child, free_port, wait_until

STARTUP_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 10.0
CONTROL_TIMEOUT_SECONDS = 10.0
LOG_TAIL_CHARS = 4000

# Control calls go straight to the local process, never through an environment proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FaultProxyError(RuntimeError):
    """The proxy process did not start, or a control call failed."""


class FaultProxy:
    """The fault proxy as a separate process, started on entering the ``with`` block:

    with FaultProxy(sandbox.url, targets={"crm.create": "POST /crm/enquiries"}) as proxy:
        proxy.fault("crm.create", "drop_after_forward")
        ...  # point the code under test at proxy.url
        assert proxy.stats()["targets"]["crm.create"]["forwarded"] == 1
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
        self.upstream_url = upstream_url
        self.requested_port = port
        self.port: int | None = None
        self.upstream_timeout = upstream_timeout
        self.startup_timeout = startup_timeout
        self._log_path = Path(log_path) if log_path is not None else None
        self._child: Child | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        if self.running:
            raise FaultProxyError(f"fault proxy already running at {self.url}")
        self.port = self.requested_port or free_port(self.host)
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="faultproxy-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        command = [
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
            command += ["--target", f"{name}={pattern}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        # `-m harness.faultproxy` finds the package from the project root.
        child = Child(
            "faultproxy", command, env, self._log_path, cwd=PROJECT_ROOT, own_session=False
        )
        self._child = child.start()
        try:
            answered = wait_until(
                self._answers_or_exited,
                timeout=self.startup_timeout,
                what=f"fault proxy answering on {self.url}",
                error=FaultProxyError,
            )
        except FaultProxyError as exc:
            self.kill()
            raise FaultProxyError(
                f"{exc}; its output:\n{child.log_since_start(LOG_TAIL_CHARS)}"
            ) from None
        if answered == "exited":
            self._child = None
            raise FaultProxyError(
                f"fault proxy exited with code {child.process.returncode} before answering on "
                f"{self.url}; its output:\n{child.log_since_start(LOG_TAIL_CHARS)}"
            )
        return self

    def stop(self) -> None:
        """SIGTERM, then wait for an orderly exit (SIGKILL if it does not come)."""
        child, self._child = self._child, None
        if child is not None:
            child.stop(timeout=STOP_TIMEOUT_SECONDS)

    def kill(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()

    @property
    def running(self) -> bool:
        return self._child is not None and self._child.running

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child else None

    @property
    def url(self) -> str:
        if self.port is None:
            raise FaultProxyError("fault proxy not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    def __enter__(self) -> FaultProxy:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

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

    # -- internals -----------------------------------------------------------------------------

    def _answers_or_exited(self) -> str | None:
        if not self.running:
            return "exited"
        request = urllib.request.Request(self.url + "/_proxy/stats")
        try:
            with _opener.open(request, timeout=1.0) as response:
                response.read()
                # Another process may hold the port we picked.
                if response.headers.get("X-Fault-Proxy-Pid") == str(self.pid):
                    return "answered"
        except OSError:
            pass
        return None

    def _control(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with _opener.open(request, timeout=CONTROL_TIMEOUT_SECONDS) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                body = exc.read().decode("utf-8", "replace")
            raise FaultProxyError(f"{method} {path} -> {exc.code}: {body}") from None
