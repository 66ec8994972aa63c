"""Run one function in a child process with a CPU-time and a memory budget.

A parser of what a destination sent (pypdf, for a document's text) can be made to work for
minutes on a few kilobytes. Counting what it is given (pages, objects, decoded bytes) stops the
known ways; this is the bound on every other way: the work runs in a forked child whose kernel
limits end it (``RLIMIT_CPU``: SIGXCPU past the budget, SIGKILL a second later; ``RLIMIT_AS``:
a MemoryError past the memory budget), whatever the parser does. The worker itself only waits
for the answer on a pipe, so its own memory and time stay its own.

    try:
        found = budget.run(parse, content, cpu_seconds=10, memory_bytes=512 * 2**20)
    except budget.Exceeded as exc:
        exc.what  # "cpu", "memory" or "time" (the wall-clock guard: a child that blocks)

The child never touches the parent's database connection or files: it only computes, writes
its pickled result to the pipe and leaves with ``os._exit`` (no atexit handler, no connection
closed under the parent). Linux (``/proc``) for the memory budget; elsewhere only the CPU one.
docs/decisions/0001-extraction-in-a-child-process.md says why this is not a library.
"""

from __future__ import annotations

import os
import pickle
import resource
import select
import signal
import time

# Beyond the CPU budget, a child that does not finish (blocked, not computing) is killed after
# this many times its CPU budget, plus the grace, on the wall clock: a hang guard only.
WALL_FACTOR = 3
WALL_GRACE_SECONDS = 5.0
_READ_CHUNK = 65536


class Exceeded(Exception):
    """The child ran out of its budget: ``what`` is "cpu", "memory" or "time";
    ``cpu_seconds``: the CPU time the child used, as the kernel counted it."""

    def __init__(self, what: str, message: str, *, cpu_seconds: float = 0.0):
        super().__init__(message)
        self.what = what
        self.cpu_seconds = cpu_seconds


class ChildFailed(RuntimeError):
    """The child ended without an answer for a reason that is not its budget."""


def _address_space_now() -> int | None:
    """This process's virtual size in bytes (the child starts with the same), or None."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _child(write_fd: int, func, args, cpu_seconds: int, memory_bytes: int | None) -> None:
    code = 0
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU leaves no core file
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        try:
            answer = ("ok", func(*args))
        except MemoryError:
            answer = ("memory", None)
        except Exception as exc:  # handed to the parent, raised there as it was raised here
            answer = ("raise", exc)
        try:
            payload = pickle.dumps(answer)
        except Exception as exc:
            payload = pickle.dumps(("raise", ChildFailed(f"{type(exc).__name__}: {exc}")))
        with os.fdopen(write_fd, "wb") as out:
            out.write(payload)
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def run(func, *args, cpu_seconds: float, memory_bytes: int | None = None):
    """``func(*args)`` computed in a child process with at most ``cpu_seconds`` of CPU and
    ``memory_bytes`` more address space than this process has now: its result, or the exception
    it raised, or Exceeded. ``func``, its arguments and its result must pickle."""
    cpu = max(int(cpu_seconds + 0.999), 1)
    limit = None
    if memory_bytes is not None:
        now = _address_space_now()
        limit = None if now is None else now + int(memory_bytes)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's lines are reported by the parent's result
        os.close(read_fd)
        _child(write_fd, func, args, cpu, limit)
    os.close(write_fd)
    deadline = time.monotonic() + cpu * WALL_FACTOR + WALL_GRACE_SECONDS
    try:
        payload, timed_out = _read_all(read_fd, deadline)
    finally:
        os.close(read_fd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _pid, status, usage = os.wait4(pid, 0)
    used = usage.ru_utime + usage.ru_stime
    if timed_out:
        raise Exceeded("time", f"did not finish within {deadline_words(cpu)}", cpu_seconds=used)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        raise Exceeded("cpu", f"needed more than {cpu} s of CPU", cpu_seconds=used)
    if not payload:
        raise ChildFailed(f"the child process ended without an answer (status {status})")
    what, value = pickle.loads(payload)
    if what == "memory":
        raise Exceeded(
            "memory", f"needed more than {memory_bytes // 2**20} MB of memory", cpu_seconds=used
        )
    if what == "raise":
        raise value
    return value


def deadline_words(cpu: int) -> str:
    return f"{cpu * WALL_FACTOR + WALL_GRACE_SECONDS:g} s"


def _read_all(fd: int, deadline: float) -> tuple[bytes, bool]:
    """Everything the child writes, until it closes the pipe; (what was read, timed out)."""
    chunks = []
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), True
        if not poller.poll(left * 1000):
            continue
        chunk = os.read(fd, _READ_CHUNK)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)
