"""The one way test equipment starts, waits for and talks to another process: a free port, a
bounded poll, a child process with its output in a log file, and a JSON call to its control API.

``Child`` is the one process wrapper: the sandbox's test helper (``harness.sandbox_process``)
and the fault proxy (``harness.faultproxy.process``) are Childs that build their command at
start, as are the drill's clusters and web servers and the tests' clusters; BottleCRM and the
benchmarks start plain ones. The commands themselves are built here once each:
``sandbox_command`` (``python -m sandbox``), ``qcluster_command`` (``manage.py qcluster``) and
``web_command`` (``python -m config.serve``); a child that must stop with its starter takes
``config.lifetime``'s ``stop_with`` as its ``preexec_fn``. Standard library only, so nothing
here loads Django or the product.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent

CONTROL_TIMEOUT_SECONDS = 10.0
LOG_TAIL_CHARS = 4000


def sandbox_command(
    port: int, data: str | os.PathLike[str], *, host: str = "127.0.0.1", token: str | None = None
) -> list[str]:
    """``python -m sandbox`` on ``host:port``, keeping its state in the SQLite file ``data``."""
    command = [sys.executable, "-m", "sandbox", "--host", host, "--port", str(port)]
    command += ["--data", str(data)]
    if token:
        command += ["--token", token]
    return command


def qcluster_command(*options: str) -> list[str]:
    """``manage.py qcluster`` (ledger's: a cluster that stops when told), run from the project
    root (``Child``'s default ``cwd``)."""
    return [sys.executable, "manage.py", "qcluster", *options]


def web_command(listen: str, *options: str) -> list[str]:
    """The product's web server, ``python -m config.serve --listen host:port`` (waitress)."""
    return [sys.executable, "-m", "config.serve", "--listen", listen, *options]


# Calls to a child go straight to the local process, never through an environment proxy.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def wait_until(
    predicate,
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
    error: type[Exception] = RuntimeError,
):
    """Call ``predicate`` until it returns something truthy and return that; after ``timeout``
    seconds raise ``error`` saying what was awaited and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"{what}: not within {timeout:g}s (last seen: {value!r})")
        time.sleep(interval)


def control_call(
    base_url: str,
    method: str,
    path: str,
    payload: Any = None,
    *,
    error: type[Exception] = RuntimeError,
    timeout: float = CONTROL_TIMEOUT_SECONDS,
) -> Any:
    """A JSON call to a child's control API at ``base_url`` (``payload`` as the JSON body): its
    JSON answer, or ``error`` quoting the status and body when it answers an error status."""
    data = None if payload is None else json.dumps(payload).encode("utf-8")
    request = urllib.request.Request(
        base_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with _opener.open(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:  # an HTTPError holds the open response; close it
            body = exc.read().decode("utf-8", "replace")
        raise error(f"{method} {path} -> {exc.code}: {body}") from None


class Child:
    """One child process, its output appended to ``log_path`` (emptied first with
    ``fresh_log``; discarded when None). ``env=None``: this process's environment.

    ``own_session``: the child leads its own process group, so ``kill()`` takes down exactly it
    and whatever it started (a cluster's workers, gunicorn's), and a Ctrl-C meant for the
    caller is not its. Without, ``kill()`` and ``stop()`` signal the child alone.

    ``with Child(...) as child:`` starts it (unless running) and stops it on the way out.
    A subclass may set ``command``, ``env`` and ``log_path`` just before ``start()``.
    """

    def __init__(
        self,
        name: str,
        command: list[str],
        env: dict[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = PROJECT_ROOT,
        own_session: bool = True,
        preexec_fn: Callable[[], None] | None = None,
        stop_timeout: float = 5.0,
        fresh_log: bool = False,
    ):
        self.name = name
        self.command = command
        self.env = env
        self.log_path = Path(log_path) if log_path is not None else None
        self.cwd = cwd
        self.own_session = own_session
        self.preexec_fn = preexec_fn
        self.stop_timeout = stop_timeout
        self.fresh_log = fresh_log
        self.process: subprocess.Popen[bytes] | None = None
        self.log_offset = 0

    def start(self) -> Child:
        if self.log_path is None:
            self.process = self._popen(subprocess.DEVNULL)
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        if self.fresh_log:
            self.log_path.unlink(missing_ok=True)
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # The child keeps its own copy of the descriptor; ours can close at once.
        with open(self.log_path, "ab") as log:
            self.process = self._popen(log)
        return self

    def _popen(self, output: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.command,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=self.own_session,
            preexec_fn=self.preexec_fn,
        )

    def wait_answers(
        self,
        url: str,
        *,
        timeout: float,
        pid_header: str | None = None,
        error: type[Exception] = RuntimeError,
        interval: float = 0.05,
    ) -> Child:
        """Wait until a GET of ``url`` is answered, whatever the status; with ``pid_header``,
        only by an answer naming this child's pid there (another process may hold the port).
        If the child exits first, or ``timeout`` passes, kill it and raise ``error`` with its
        output since it started."""

        def answered_or_exited() -> str | None:
            if not self.running:
                return "exited"
            try:
                with _opener.open(url, timeout=1.0) as response:
                    response.read()
                    headers = response.headers
            except urllib.error.HTTPError as exc:
                with exc:
                    headers = exc.headers
            except (OSError, http.client.HTTPException):
                return None
            if pid_header is None or headers.get(pid_header) == str(self.pid):
                return "answered"
            return None

        what = f"{self.name} answering on {url}"
        try:
            outcome = wait_until(
                answered_or_exited, timeout=timeout, interval=interval, what=what, error=_Late
            )
        except _Late as late:
            self.kill()
            raise error(f"{late}; its output:\n{self.log_since_start()}") from None
        if outcome == "exited":
            self.kill()  # reaps it, and with own_session whatever it left behind
            raise error(
                f"{self.name} exited with code {self.process.returncode} before answering on "
                f"{url}; its output:\n{self.log_since_start()}"
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
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text if tail is None else text[-tail:]

    def log_since_start(self, tail: int = LOG_TAIL_CHARS) -> str:
        """What this start wrote (not an earlier run's lines in the same file), for errors."""
        if self.log_path is None:
            return "(output discarded)"
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_offset)
                text = log.read().decode("utf-8", "replace")
        except OSError as exc:
            return f"(no output: {exc})"
        return text[-tail:] or "(no output)"

    def wait_exit(self, timeout: float) -> int | None:
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL (the whole group with ``own_session``): a machine losing power."""
        if self.process is None:
            return
        if self.own_session:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM (for an orderly exit), then SIGKILL whatever is left after ``timeout``
        (default: ``stop_timeout``)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.stop_timeout if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def __enter__(self) -> Child:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _Late(Exception):
    pass
