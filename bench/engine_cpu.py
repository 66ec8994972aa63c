"""The ledger's own CPU per delivered operation, in one process, without the cluster.

    python bench/engine_cpu.py                      # 300 operations, then the table
    python bench/engine_cpu.py --operations 200 --profile   # and the top functions (cProfile)

N enquiries are approved (one transaction), then each CRM write is executed in this process,
one after another (``ledger.execution.execute``: the claim, the call to the sandbox, the
outcome), after 20 to warm up. Reported per operation: the CPU this process spent (Python:
the ORM, django-fsm, psycopg, requests) and the CPU of its own PostgreSQL backend (read with
``psutil`` when the server runs on this machine), so neither the transport (django-q2, measured
as the delivery section's ``transport_floor``) nor other databases on the same server count.
A throwaway database (``--database``) is migrated and dropped, as bench/run.py does.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, bench/ comes first on the path, and its profile.py would hide the standard
# library's (which cProfile imports).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import cProfile  # noqa: E402
import pstats  # noqa: E402

from bench import common  # noqa: E402
from harness.processes import free_port  # noqa: E402

WARM_UP = 20


def _backend_cpu(pid) -> float:
    import psutil

    with contextlib.suppress(psutil.Error):
        cpu = psutil.Process(pid).cpu_times()
        return cpu.user + cpu.system
    return 0.0


def measure(count: int, profile: bool, log_dir: Path) -> dict:
    from django.db import connection, transaction

    from bench import data
    from ledger import execution
    from ledger.services import approve_revision

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    sandbox_file = log_dir / "engine-sandbox.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        sandbox_file.with_name(sandbox_file.name + suffix).unlink(missing_ok=True)
    with common.sandbox_child(port, sandbox_file, log_dir / "engine-sandbox.log") as box:
        box.wait_answers(f"{url}/_sandbox/stats", timeout=30)
        reviewer = data.user("reviewer", "bench-reviewer")
        data.sandbox_integrations(url)
        rows = data.enquiries(count + WARM_UP, prefix="E", state="ready_for_review")
        with transaction.atomic():
            ops = [approve_revision(e.pk, actor=reviewer, reason="benchmark").pk for e in rows]
        for pk in ops[:WARM_UP]:
            execution.execute(str(pk))
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
        profiler = cProfile.Profile(time.process_time) if profile else None
        backend_before, started, wall = _backend_cpu(backend), time.process_time(), time.time()
        if profiler:
            profiler.enable()
        outcomes = [execution.execute(str(pk)) for pk in ops[WARM_UP:]]
        if profiler:
            profiler.disable()
        cpu = time.process_time() - started
        backend_cpu = _backend_cpu(backend) - backend_before
        wall = time.time() - wall
    result = {
        "operations": count,
        "confirmed": outcomes.count("confirmed"),
        "cpu_ms_per_op": {
            "process": round(cpu * 1000 / count, 2),
            "postgres_backend": round(backend_cpu * 1000 / count, 2),
        },
        "wall_ms_per_op": round(wall * 1000 / count, 1),
        "profiled": profile,
    }
    if profiler:
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(25)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--operations", type=int, default=300)
    p.add_argument("--profile", action="store_true", help="cProfile (CPU time) the executions")
    p.add_argument("--database", default="handover_bench_engine")
    args = p.parse_args(argv)
    server = common.server_url()
    log_dir = ROOT / "var" / "bench" / args.database
    log_dir.mkdir(parents=True, exist_ok=True)
    url = common.recreate_database(server, args.database)
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=common.child_env(url),
        capture_output=True,
        text=True,
    )
    if migrated.returncode != 0:
        raise SystemExit(migrated.stderr[-3000:])
    common.setup_django(url)
    try:
        result = measure(args.operations, args.profile, log_dir)
    finally:
        common.close_django_connections()
        common.drop_database(server, args.database)
    cpu = result["cpu_ms_per_op"]
    print(
        f"engine: {result['confirmed']} of {result['operations']} confirmed; CPU ms/op: "
        f"this process {cpu['process']:.2f}, its PostgreSQL backend {cpu['postgres_backend']:.2f}"
        f"{' (profiled: inflated)' if result['profiled'] else ''}; wall {result['wall_ms_per_op']} "
        "ms/op"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
