"""Who is doing the work: the actor string attempts and journal rows carry, and whether the
process behind one is still alive (the sweeper's fast path after a crash on this host)."""

import os
import socket

from intake.workflow import system_actor


def worker_name(pid: int | None = None) -> str:
    return f"worker-{socket.gethostname()}-{pid or os.getpid()}"


def worker_actor() -> str:
    return system_actor(worker_name())


def process_is_gone(worker: str) -> bool:
    """True only when ``worker`` ran on this host and its process no longer runs.

    Another host's worker, or anything we cannot parse, is never declared gone: the lease's
    expiry covers those.
    """
    name = worker.removeprefix("system:")
    prefix = f"worker-{socket.gethostname()}-"
    if not name.startswith(prefix):
        return False
    try:
        pid = int(name[len(prefix) :])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # "pid (comm) S ...": a zombie (Z) or dead (X) process is gone.
            state = stat.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
