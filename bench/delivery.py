"""Delivery and reconciliation through a real django-q2 cluster into the real sandbox.

- delivery: N enquiries are approved by a reviewer (approve_revision, all in one transaction,
  so the cluster sees every task at once at the commit); the clock runs from that commit until
  every CRM operation is `confirmed`. Beside it, a bare single-threaded `requests` loop
  creates N records in the same sandbox. Duplicates are counted at the destination.
- reconciliation: N `unknown` CRM writes whose records exist at the destination get their
  reconcile task in one transaction; the clock runs from the commit until all are `confirmed`.
  Beside it, a bare loop looks the same N references up.

Beside delivery, two floors from the same run: ``transport_floor`` (tasks that do nothing,
through the same cluster: what django-q2 alone costs) and ``ceiling`` (``bare_delivery``: the
same POST between two one-statement transactions, through the same cluster: what any delivery
that commits its claim before the call and its outcome after it costs here, with nothing of
Handover's in it).

Both also record the CPU time each process tree (the cluster, the sandbox, the PostgreSQL
server) spends per operation during the measured run: ``cpu_ms_per_op`` (bench.common.CpuMeter).
"""

from __future__ import annotations

import time

from bench import baselines, data
from bench.common import (
    CpuMeter,
    child_env,
    cluster_child,
    median,
    median_cpu,
    postmaster_pid,
    ratio,
    sandbox_child,
)
from harness.processes import free_port, wait_until


def _stats(url: str) -> dict:
    import requests

    return requests.get(f"{url}/_sandbox/stats", timeout=30).json()


def _records_for(stats: dict, prefix: str) -> dict[str, int]:
    by_reference = stats["crm"]["by_reference"]
    return {ref: n for ref, n in by_reference.items() if ref.startswith(prefix + "-")}


def _confirmed(prefix: str) -> int:
    from ledger.models import Operation, OperationState

    return Operation.objects.filter(
        action="crm.create_enquiry",
        state=OperationState.CONFIRMED,
        enquiry__reference__startswith=prefix + "-",
    ).count()


def _in_flight() -> bool:
    """Whether any CRM write is still on its way (approved, submitted or unknown). Read from
    the partial index ``operation_open`` and stopped at the first row: the poll costs a
    fraction of a millisecond whatever the size. Counting the confirmed writes of the run by
    their enquiries' references (a join, 20 times a second) was a third of PostgreSQL's
    statement time in this section and was charged to ``postgres`` in ``cpu_ms_per_op``
    (docs/benchmarks.md, issue 29): the bench's cost, not Handover's."""
    from ledger.models import Operation, OperationState

    return Operation.objects.filter(
        action="crm.create_enquiry",
        state__in=(OperationState.APPROVED, OperationState.SUBMITTED, OperationState.UNKNOWN),
    ).exists()


def _until_confirmed(count, prefix, timeout, roots, what):
    """(seconds from now until ``count`` CRM writes of ``prefix`` are confirmed, the CPU each
    process spent meanwhile). Each run starts once the previous one is done, so "no CRM write
    in flight" is the end of this one; the confirmed writes of ``prefix`` are then counted once
    (one that failed instead is an error, as a timeout is)."""
    started = time.perf_counter()
    with CpuMeter(roots or {}) as cpu:
        wait_until(
            lambda: not _in_flight(),
            timeout=timeout,
            interval=0.05,
            what=f"{what} ({prefix}) confirmed",
        )
    elapsed = time.perf_counter() - started
    confirmed = _confirmed(prefix)
    if confirmed < count:
        raise RuntimeError(f"{what} ({prefix}): {confirmed} of {count} confirmed, none in flight")
    return elapsed, cpu


def noop(_arg):
    """The transport floor's task: django-q2 hands it over and acknowledges it; it does nothing."""
    return None


def _transport_floor(count: int, roots) -> dict:
    """What django-q2 alone costs per task on this machine, in the same run: ``count`` tasks
    that do nothing, queued in one transaction as the ledger queues its own (the ORM broker,
    ``ledger.queueing``), and the CPU each process spends until the queue is empty. The part of
    a delivery's CPU no change inside the ledger's code can remove."""
    from django.db import transaction
    from django_q.models import OrmQ

    from ledger.queueing import _push, batched

    with transaction.atomic(), batched():
        for n in range(count):
            _push("bench.delivery.noop", str(n), None)
    started = time.perf_counter()
    with CpuMeter(roots or {}) as cpu:
        wait_until(lambda: not OrmQ.objects.exists(), timeout=120, interval=0.05, what="no-ops")
    elapsed = time.perf_counter() - started
    return {
        "count": count,
        "tasks_per_s": round(count / elapsed, 1),
        "cpu_ms_per_task": cpu.ms_per(count),
    }


CEILING_TABLE = "bench_delivery_ceiling"
_ceiling_session = None


def bare_delivery(row_id):
    """The delivery ceiling's task: the design's order with nothing of Handover's in it. Claim
    (one UPDATE to `submitted`, committed before the call), the same POST the bare loop sends,
    through one kept ``requests.Session``, then the outcome (one UPDATE, committed). No
    journal, no attempt row, no enquiry, no state machine, no limits, no look-up."""
    import os

    import requests
    from django.db import connection, transaction

    global _ceiling_session
    if _ceiling_session is None:
        _ceiling_session = requests.Session()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {CEILING_TABLE} SET state = 'submitted', attempts = attempts + 1 "
            "WHERE id = %s AND state = 'approved' RETURNING reference",
            [row_id],
        )
        row = cursor.fetchone()
    if row is None:
        return
    reference = row[0]
    response = _ceiling_session.post(
        f"{os.environ['SANDBOX_URL']}/crm/enquiries",
        json={"reference": reference, "name": "Bench", "message": "bench"},
        headers={"Idempotency-Key": reference},
        timeout=10,
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {CEILING_TABLE} SET state = %s, status = %s WHERE id = %s",
            ["confirmed" if response.ok else "failed", response.status_code, row_id],
        )


def _delivery_ceiling(count: int, prefix: str, roots) -> dict:
    """What a delivery with everything of Handover's taken out costs here, in the same run:
    ``count`` rows of a bare table, each delivered by ``bare_delivery`` through the same
    django-q2 cluster and ORM broker (tasks queued in one transaction, as approvals queue
    theirs) into the same sandbox, and the CPU each process spends until none is in flight."""
    from django.db import connection, transaction

    from ledger.queueing import _push, batched

    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {CEILING_TABLE} (id bigserial PRIMARY KEY, "
            "reference text UNIQUE, state text NOT NULL, attempts int NOT NULL DEFAULT 0, "
            "status int)"
        )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {CEILING_TABLE} (reference, state) "
            "SELECT %s || '-' || n, 'approved' FROM generate_series(1, %s) n RETURNING id",
            [prefix, count],
        )
        ids = [row[0] for row in cursor.fetchall()]
        with batched():
            for row_id in ids:
                _push("bench.delivery.bare_delivery", str(row_id), None)

    def in_flight():
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FILTER (WHERE state IN ('approved', 'submitted')), "
                f"count(*) FILTER (WHERE state = 'confirmed') FROM {CEILING_TABLE} "
                "WHERE reference LIKE %s",
                [prefix + "-%"],
            )
            return cursor.fetchone()

    started = time.perf_counter()
    with CpuMeter(roots or {}) as cpu:
        wait_until(lambda: in_flight()[0] == 0, timeout=120, interval=0.05, what="ceiling")
    elapsed = time.perf_counter() - started
    confirmed = in_flight()[1]
    if confirmed < count:
        raise RuntimeError(f"delivery ceiling: {confirmed} of {count} confirmed")
    return {
        "count": count,
        "confirmed_per_s": round(count / elapsed, 1),
        "cpu_ms_per_op": cpu.ms_per(count),
    }


def _deliver(count: int, prefix: str, reviewer, timeout: float, roots=None) -> dict:
    from django.db import transaction

    from ledger.services import approve_revision

    rows = data.enquiries(count, prefix=prefix, state="ready_for_review")
    started = time.perf_counter()
    with transaction.atomic():
        for enquiry in rows:
            approve_revision(enquiry.pk, actor=reviewer, reason="benchmark")
    committed = time.perf_counter()
    elapsed, cpu = _until_confirmed(count, prefix, timeout, roots, f"{count} deliveries")
    return {
        "count": count,
        "seconds": round(elapsed, 3),
        "confirmed_per_s": round(count / elapsed, 1),
        "approvals_per_s": round(count / (committed - started), 1),
        "cpu_ms_per_op": cpu.ms_per(count),
    }


def _reconcile(count: int, prefix: str, crm, sandbox_url: str, timeout: float, roots=None) -> dict:
    from django.db import transaction

    from ledger.queueing import RECONCILE, enqueue

    # The records exist at the destination (the write committed; its answer was lost).
    baselines.bare_create_loop(sandbox_url, count, prefix)
    rows = data.enquiries(count, prefix=prefix, state="submission_unknown")
    references = [e.reference for e in rows]
    baseline = baselines.bare_lookup_loop(sandbox_url, references)
    with transaction.atomic():
        ops = data.unknown_crm_operations(rows, crm)
        for op in ops:
            enqueue(op, RECONCILE)
    elapsed, cpu = _until_confirmed(count, prefix, timeout, roots, f"{count} reconciliations")
    return {
        "count": count,
        "seconds": round(elapsed, 3),
        "reconciled_per_s": round(count / elapsed, 1),
        "baseline_per_s": round(baseline["per_s"], 1),
        "cpu_ms_per_op": cpu.ms_per(count),
    }


def measure(db_url: str, args, log_dir, *, sections=("delivery", "reconciliation")) -> dict:
    sandbox_port = free_port()
    sandbox_url = f"http://127.0.0.1:{sandbox_port}"
    sandbox_file = log_dir / "sandbox.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        sandbox_file.with_name(sandbox_file.name + suffix).unlink(missing_ok=True)
    reviewer = data.user("reviewer", "bench-reviewer")
    integrations = data.sandbox_integrations(sandbox_url)
    crm = integrations["crm"]
    env = child_env(db_url, Q_WORKERS=args.q_workers, SANDBOX_URL=sandbox_url)
    if args.q_poll:
        env["Q_POLL"] = str(args.q_poll)
    timeout = max(120.0, args.deliveries / 2)
    results: dict = {}
    with (
        sandbox_child(sandbox_port, sandbox_file, log_dir / "sandbox.log") as box,
        cluster_child(env, log_dir / "qcluster.log") as cluster,
    ):
        box.wait_answers(f"{sandbox_url}/_sandbox/stats", timeout=30)
        # CPU by process during each measured run (bench.common.CpuMeter).
        roots = {"cluster": cluster.pid, "sandbox": box.pid}
        server = postmaster_pid(db_url)
        if server is not None:
            roots["postgres"] = server
        # Warm up: the workers' imports, connections and the sandbox's files.
        _deliver(min(20, args.deliveries), "W", reviewer, timeout=120)
        if "delivery" in sections:
            runs = []
            for run in range(args.runs):
                base = baselines.bare_create_loop(sandbox_url, args.deliveries, f"B{run}")
                measured = _deliver(args.deliveries, f"D{run}", reviewer, timeout, roots)
                records = _records_for(_stats(sandbox_url), f"D{run}")
                runs.append(
                    {
                        **measured,
                        "baseline_per_s": round(base["per_s"], 1),
                        "ratio": ratio(measured["confirmed_per_s"], base["per_s"]),
                        "records": sum(records.values()),
                        "duplicates": sum(n - 1 for n in records.values() if n > 1),
                        "missing": args.deliveries - len(records),
                    }
                )
            per_s = median([r["confirmed_per_s"] for r in runs])
            base = median([r["baseline_per_s"] for r in runs])
            floor = _transport_floor(args.deliveries, roots)
            ceiling = _delivery_ceiling(args.deliveries, "C", roots)
            results["delivery"] = {
                "confirmed_per_s": round(per_s, 1),
                "baseline_per_s": round(base, 1),
                "ratio": ratio(per_s, base),
                "duplicates": sum(r["duplicates"] for r in runs),
                "missing": sum(r["missing"] for r in runs),
                "operations_per_run": args.deliveries,
                "q_workers": args.q_workers,
                "cpu_ms_per_op": median_cpu(runs, "cpu_ms_per_op"),
                "transport_floor": floor,
                "ceiling": ceiling,
                "runs": runs,
            }
        if "reconciliation" in sections:
            runs = []
            for run in range(args.runs):
                measured = _reconcile(
                    args.reconciliations, f"R{run}", crm, sandbox_url, timeout, roots
                )
                measured["ratio"] = ratio(measured["reconciled_per_s"], measured["baseline_per_s"])
                runs.append(measured)
            per_s = median([r["reconciled_per_s"] for r in runs])
            base = median([r["baseline_per_s"] for r in runs])
            results["reconciliation"] = {
                "reconciled_per_s": round(per_s, 1),
                "baseline_per_s": round(base, 1),
                "ratio": ratio(per_s, base),
                "operations_per_run": args.reconciliations,
                "q_workers": args.q_workers,
                "cpu_ms_per_op": median_cpu(runs, "cpu_ms_per_op"),
                "runs": runs,
            }
    return results
