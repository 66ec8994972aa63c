"""The one way test equipment starts and waits for another process: a free port, a bounded
poll, and a child process with its output in a log file.

Used by the sandbox's test helper (sandbox.testing), the fault proxy, BottleCRM, the drill and
its clusters and web servers, the tests' clusters and the benchmarks. Standard library only, so
``sandbox.testing`` stays free of Django and of the product.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


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


class Child:
    """One child process, its output appended to ``log_path``.

    ``own_session``: the child leads its own process group, so ``kill()`` takes down exactly it
    and whatever it started (a cluster's workers, gunicorn's), and a Ctrl-C meant for the
    caller is not its. Without, ``kill()`` and ``stop()`` signal the child alone.
    """

    def __init__(
        self,
        name: str,
        command: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        cwd: str | os.PathLike[str] | None = PROJECT_ROOT,
        own_session: bool = True,
        preexec_fn: Callable[[], None] | None = None,
    ):
        self.name = name
        self.command = command
        self.env = env
        self.log_path = Path(log_path)
        self.cwd = cwd
        self.own_session = own_session
        self.preexec_fn = preexec_fn
        self.process: subprocess.Popen[bytes] | None = None
        self.log_offset = 0

    def start(self) -> Child:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # The child keeps its own copy of the descriptor; ours can close at once.
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.own_session,
                preexec_fn=self.preexec_fn,
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

    def log_since_start(self, tail: int = 4000) -> str:
        """What this start wrote (not an earlier run's lines in the same file), for errors."""
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

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (for an orderly exit), then SIGKILL whatever is left after ``timeout``."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
