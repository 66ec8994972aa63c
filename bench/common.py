"""Shared pieces of the benchmarks: a throwaway database, timing, percentiles, CPU by process.

The children (web servers, clusters, the sandbox) are ``harness.processes.Child``: each with a
fresh log under var/bench/, stopped on leaving its ``with`` block (SIGTERM, then SIGKILL of its
whole group after ``STOP_TIMEOUT_SECONDS``), never left behind.
"""

import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from harness.processes import Child, qcluster_command, sandbox_command

ROOT = Path(__file__).resolve().parent.parent
BENCH_DB = "handover_bench"
STOP_TIMEOUT_SECONDS = 15.0


def server_url() -> str:
    """The PostgreSQL server: DATABASE_URL, or the embedded one under var/ (held open)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    sys.path.insert(0, str(ROOT))
    from config.db import embedded_database_url

    return embedded_database_url(ROOT)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def recreate_database(url: str, name: str = BENCH_DB) -> str:
    admin = with_database(url, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(url, name)


def child(name: str, command: list[str], env: dict | None, log_path: Path) -> Child:
    """A benchmark's child process: a fresh log each run, ``STOP_TIMEOUT_SECONDS`` to stop."""
    return Child(name, command, env, log_path, stop_timeout=STOP_TIMEOUT_SECONDS, fresh_log=True)


def sandbox_child(port: int, data_file: Path, log_path: Path) -> Child:
    """``python -m sandbox`` on ``port`` keeping its state in ``data_file``."""
    return child("sandbox", sandbox_command(port, data_file), None, log_path)


def cluster_child(env: dict, log_path: Path) -> Child:
    """``manage.py qcluster`` with ``env`` (``child_env``)."""
    return child("qcluster", qcluster_command(), env, log_path)


def percentile(values, pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(values):
    return statistics.median(values) if values else 0.0


def ratio(measured: float, baseline: float) -> float:
    return round(measured / baseline, 3) if baseline else 0.0


# --- added for bench/run.py ---------------------------------------------------------------------

TEMPLATE_DB = "handover_bench_template"
# A fixed intake secret for the benchmark's own source (never a real one).
BENCH_SOURCE = "bench"
BENCH_SECRET = "whsec_" + "YmVuY2gtc2VjcmV0LW5vdC1mb3ItcHJvZHVjdGlvbiE="


def child_env(db_url: str, **extra) -> dict:
    """The environment every child (gunicorn, qcluster, manage.py) and this process run with.

    Production-like: DEBUG off (no query log), persistent connections, plain HTTP on loopback.
    """
    env = dict(os.environ)
    # pytest (the smoke test) must not make the children run in test mode.
    env.pop("PYTEST_VERSION", None)
    env.update(
        {
            "DATABASE_URL": db_url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DEBUG": "0",
            "HANDOVER_TESTING": "0",
            "SECURE": "0",
            "SECRET_KEY": "bench-" + "k" * 50,
            "ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
            "INTAKE_SECRETS": json.dumps({BENCH_SOURCE: [BENCH_SECRET]}),
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def migrate_template(server: str, log_dir: Path, name: str = TEMPLATE_DB) -> None:
    """Migrate a fresh template database once; each section starts from a copy of it."""
    url = recreate_database(server, name)
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=child_env(url),
        capture_output=True,
        text=True,
        timeout=600,
    )
    (log_dir / "migrate.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise RuntimeError(f"migrate failed:\n{result.stderr[-3000:]}")


def fresh_database(server: str, name: str = BENCH_DB, template: str = TEMPLATE_DB) -> str:
    """``name`` as a copy of the freshly migrated template (a file copy: a second or two)."""
    admin = with_database(server, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return with_database(server, name)


def drop_database(server: str, name: str) -> None:
    admin = with_database(server, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup_django(db_url: str, **extra) -> None:
    """This process as a Django client of ``db_url`` (same settings as the children)."""
    os.environ.update({k: v for k, v in child_env(db_url, **extra).items() if k != "PATH"})
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def close_django_connections() -> None:
    from django.db import connections

    connections.close_all()


def machine() -> dict:
    """What the figures were taken on (a shared machine: say so)."""
    import platform

    info = {
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "shared": True,
    }
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in lscpu.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Hypervisor vendor", "L2 cache", "L3 cache"):
                info[key.strip().lower().replace(" ", "_").replace("(s)", "s")] = value.strip()
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    return info


def postgres_info(url: str) -> dict:
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("shared_buffers", "synchronous_commit", "fsync", "work_mem")
        }
    return {"version": version, **settings}


# --- CPU by process -----------------------------------------------------------------------------


class CpuMeter:
    """CPU seconds (user + system) that process trees spend during a block, by kind.

    ``roots``: {kind: pid}; the root and all its descendants, including those that start or
    end during the block (see _sample). ``bench`` is this process. On a shared machine the
    wall-clock figures move with the neighbours; CPU per operation moves less, and says which
    process the time goes to.
    """

    def __init__(self, roots: dict[str, int]):
        self.roots = roots

    def _sample(self) -> dict[str, float]:
        """CPU seconds so far, per kind: every live process of the tree, each with what its
        exited children cost (the kernel adds a reaped child's time to its parent's: django-q2
        recycles its workers, PostgreSQL's backends come and go), so that the difference of
        two samples counts processes that started, ended or both in between."""
        import psutil

        sample = {"bench": time.process_time()}
        for kind, pid in self.roots.items():
            total = 0.0
            with contextlib.suppress(psutil.NoSuchProcess):
                root = psutil.Process(pid)
                for proc in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        cpu = proc.cpu_times()
                        total += cpu.user + cpu.system + cpu.children_user + cpu.children_system
            sample[kind] = total
        return sample

    def __enter__(self):
        self.before = self._sample()
        return self

    def __exit__(self, *exc):
        after = self._sample()
        self.seconds = {kind: after[kind] - self.before.get(kind, 0.0) for kind in after}
        return False

    def ms_per(self, count: int) -> dict[str, float]:
        return {kind: round(s * 1000 / count, 2) for kind, s in sorted(self.seconds.items())}


def median_cpu(runs: list[dict], key: str) -> dict[str, float]:
    """Per process kind, the median over the runs of ``run[key]`` (CpuMeter.ms_per's dict)."""
    kinds = sorted({kind for r in runs for kind in r[key]})
    return {k: round(median([r[key].get(k, 0.0) for r in runs]), 2) for k in kinds}


def postmaster_pid(url: str) -> int | None:
    """The PostgreSQL server's main process (the parent of this connection's backend), when it
    runs on this machine and can be seen; None otherwise."""
    import psutil

    with psycopg.connect(url, autocommit=True) as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        try:  # while the backend still runs: it ends with the connection
            parent = psutil.Process(backend).parent()
        except psutil.Error:
            return None
    return parent.pid if parent is not None else None
