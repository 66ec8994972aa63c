"""Who is doing the work: the actor string attempts and journal rows carry, and whether the
process behind one is still alive (the sweeper's fast path after a crash on this host)."""

import os
import socket

from django.conf import settings

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


# Every connection a cluster's processes open carries this name in pg_stat_activity, so that
# something that must not run beside live workers (the drill) can see them
# (workers_on_this_database).
APPLICATION_NAME = "handover-qcluster"


def name_connections() -> None:
    """Before the cluster forks: its processes connect after the fork, with this name."""
    for alias in settings.DATABASES:
        options = settings.DATABASES[alias].setdefault("OPTIONS", {})
        options.setdefault("application_name", APPLICATION_NAME)


def workers_on_this_database(exclude_pids=()) -> list[str]:
    """The live clusters' connections to this database, as "host (pid)" lines: any at all
    means a cluster is running against it (its pusher polls the queue without pause)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(host(client_addr), 'local'), pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s "
            "AND pid <> pg_backend_pid()",
            [APPLICATION_NAME],
        )
        rows = cursor.fetchall()
    return [f"{host} (backend {pid})" for host, pid in rows if pid not in exclude_pids]
