"""Performance at the destination's limit: draining a backlog, and approval to `confirmed`.

- drain: N CRM writes held while the CRM integration was paused are released at once (one
  release_backlog) against the sandbox limited to R calls a second (R = --drain-rate, but at
  most half of the delivery capacity measured in the same run, so that the ratio measures the
  limiter and not the machine; both are recorded) (its rate_limit capability:
  429 with Retry-After above R), with the CRM integration's max_requests_per_second = R. The
  clock runs from the release's commit until every write is `confirmed`. Counted at the
  sandbox: the most calls in any one-second window (sliding), the 429s, records per reference.
  Run with one cluster and with two at once (the limit is global: the state is in PostgreSQL).
- latency: approval to `confirmed`, one approval at a time at a steady offered load of half the
  delivery capacity (the delivery section's figure from the same run, else measured here with a
  burst), no limit on the integration: p50 and p99 over every operation.
"""

from __future__ import annotations

import time

from bench import data
from bench.common import child_env, cluster_child, median, percentile, sandbox_child
from bench.delivery import _confirmed, _deliver, _records_for, _stats
from harness.processes import free_port, wait_until


def _control(url: str, path: str, body: dict | None = None) -> dict:
    import requests

    return requests.post(f"{url}/_sandbox/{path}", json=body or {}, timeout=30).json()


def _clusters(count: int, env: dict, log_dir, tag: str):
    from contextlib import ExitStack

    stack = ExitStack()
    for n in range(count):
        stack.enter_context(cluster_child(env, log_dir / f"qcluster-{tag}-{n + 1}.log"))
    return stack


def _drain_once(count, prefix, rate, sandbox_url, reviewer, clusters, env, log_dir) -> dict:
    from django.db import transaction

    from ledger.models import Attempt, Integration
    from ledger.services import (
        approve_revision,
        pause_integration,
        release_backlog,
        resume_integration,
    )

    actor = "system:bench"
    _control(sandbox_url, "reset")
    _control(sandbox_url, "capabilities", {"rate_limit_per_second": rate})
    pause_integration("crm", actor=actor, reason="benchmark: the CRM is down")
    rows = data.enquiries(count, prefix=prefix, state="ready_for_review")
    with transaction.atomic():
        for enquiry in rows:
            approve_revision(enquiry.pk, actor=reviewer, reason="benchmark")
    resume_integration("crm", actor=actor, reason="benchmark: the CRM is back")
    with _clusters(clusters, env, log_dir, prefix):
        # The clusters start with nothing to do but the held backlog; give them their start.
        time.sleep(3)
        started = time.perf_counter()
        released = len(release_backlog("crm", actor=actor, reason="benchmark: drain"))
        committed = time.perf_counter()
        wait_until(
            lambda: _confirmed(prefix) >= count,
            timeout=count / rate * 3 + 120,
            interval=0.2,
            what=f"{count} drained ({prefix}) confirmed",
        )
        elapsed = time.perf_counter() - started
    stats = _stats(sandbox_url)
    records = _records_for(stats, prefix)
    calls = sum(stats["per_second"].get("crm.create", {}).values())
    throttled = stats["rate_limited"].get("crm.create", 0)
    per_s = count / elapsed
    seconds = stats["per_second"].get("crm.create", {})
    busy = sorted(seconds.items())[1:-1]  # whole seconds only: not the first or the last
    crm = Integration.objects.get(name="crm")
    return {
        "clusters": clusters,
        "count": count,
        "released": released,
        "release_seconds": round(committed - started, 3),
        "seconds": round(elapsed, 3),
        "rate_per_s": round(per_s, 2),
        "ratio": round(per_s / rate, 3),
        "max_in_any_second": stats["max_in_any_second"].get("crm.create", 0),
        "max_in_a_calendar_second": max(seconds.values(), default=0),
        "median_calls_in_a_whole_second": median([n for _, n in busy]),
        "calls": calls,
        "throttled": throttled,
        "throttled_share": round(throttled / calls, 4) if calls else 0.0,
        "call_attempts": Attempt.objects.filter(
            kind="call", operation__enquiry__reference__startswith=prefix + "-"
        ).count(),
        "duplicates": sum(n - 1 for n in records.values() if n > 1),
        "missing": count - len(records),
        "throttled_until_after": crm.throttled_until.isoformat() if crm.throttled_until else None,
    }


def _setup(db_url: str, args, log_dir, name: str):
    """A sandbox's port, URL and fresh data file, the reviewer, and the clusters' environment,
    with every integration pointed at that sandbox."""
    sandbox_port = free_port()
    sandbox_url = f"http://127.0.0.1:{sandbox_port}"
    sandbox_file = log_dir / f"sandbox-{name}.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        sandbox_file.with_name(sandbox_file.name + suffix).unlink(missing_ok=True)
    reviewer = data.user("reviewer", "bench-reviewer")
    data.sandbox_integrations(sandbox_url)
    env = child_env(db_url, Q_WORKERS=args.q_workers, SANDBOX_URL=sandbox_url)
    if args.q_poll:
        env["Q_POLL"] = str(args.q_poll)
    return sandbox_port, sandbox_url, sandbox_file, reviewer, env


def measure_drain(db_url: str, args, log_dir, *, capacity_per_s: float | None = None) -> dict:
    from ledger.models import Integration

    sandbox_port, sandbox_url, sandbox_file, reviewer, env = _setup(db_url, args, log_dir, "drain")
    source = "delivery section of this run"
    runs = []
    with sandbox_child(sandbox_port, sandbox_file, log_dir / "sandbox-drain.log") as box:
        box.wait_answers(f"{sandbox_url}/_sandbox/stats", timeout=30)
        if not capacity_per_s:
            # What this machine delivers now with no limit, so that R can be kept "well below
            # what the machine can send": above it the ratio measures the machine, not the
            # limiter (R = 40 on a busy 2-core machine that delivered 10-22/s gave 0.25-0.55).
            with _clusters(1, env, log_dir, "DC"):
                _deliver(20, "DW", reviewer, timeout=120)  # warm up
                burst = _deliver(args.deliveries, "DC", reviewer, timeout=300)
            capacity_per_s = burst["confirmed_per_s"]
            source = f"a burst of {args.deliveries} measured in this section"
        # R: the one asked for, but at most half of the capacity measured in this run.
        rate = min(args.drain_rate, max(1.0, round(capacity_per_s / 2)))
        Integration.objects.filter(name="crm").update(max_requests_per_second=rate)
        for n, clusters in enumerate(args.drain_clusters):
            print(f"bench: drain {args.drains} at {rate:g}/s, {clusters} cluster(s)", flush=True)
            runs.append(
                _drain_once(
                    args.drains, f"N{n}", rate, sandbox_url, reviewer, clusters, env, log_dir
                )
            )
    worst = min(runs, key=lambda r: r["ratio"])
    return {
        "limit_per_s": rate,
        "limit_asked_per_s": args.drain_rate,
        "capacity_per_s": round(capacity_per_s, 1),
        "capacity_from": source,
        "operations_per_run": args.drains,
        "q_workers": args.q_workers,
        # The figures are the worst run's; every run is kept below.
        "rate_per_s": worst["rate_per_s"],
        "ratio": worst["ratio"],
        "max_in_any_second": max(r["max_in_any_second"] for r in runs),
        "throttled": sum(r["throttled"] for r in runs),
        "throttled_share": max(r["throttled_share"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
        "runs": runs,
    }


LATE_AFTER_SECONDS = 0.05  # an approval that starts later than this after its slot is late
# The offered rate counts as met when the approvers achieved at least this share of it and at
# most this share of the approvals started late: otherwise the p99 was taken at another rate,
# and the result says so (``offered_met`` False, the achieved rate beside it).
MET_SHARE = 0.95
LATE_SHARE = 0.05


def _approve_on_schedule(rows, offered: float, reviewer, approvers: int):
    """Approve ``rows`` at ``offered`` per second, open loop: approval n is due at n / offered
    after the start, whichever of ``approvers`` threads is free takes it, so one slow approval
    never pushes the rest of the schedule back. Returns ({operation pk: (monotonic time the
    approval committed, wall-clock time it committed)}, [seconds each started after its slot])."""
    import threading

    from django.db import connection, transaction
    from django.utils import timezone

    from ledger.services import approve_revision

    lock = threading.Lock()
    slots = iter(range(len(rows)))
    approved_at, lags, errors = {}, [], []
    started = time.perf_counter() + 0.1

    def approver():
        try:
            while True:
                with lock:
                    n = next(slots, None)
                if n is None:
                    return
                due = started + n / offered
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                lag = time.perf_counter() - due
                with transaction.atomic():
                    op = approve_revision(rows[n].pk, actor=reviewer, reason="benchmark")
                done = (time.perf_counter(), timezone.now())  # the approval has committed
                with lock:
                    approved_at[op.pk] = done
                    lags.append(lag)
        except Exception as exc:  # reported below, in the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=approver) for _ in range(max(1, approvers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return approved_at, lags


def measure_latency(db_url: str, args, log_dir, *, capacity_per_s: float | None = None) -> dict:

    from ledger.models import Operation, OperationState

    sandbox_port, sandbox_url, sandbox_file, reviewer, env = _setup(
        db_url, args, log_dir, "latency"
    )
    timeout = 300.0
    with (
        sandbox_child(sandbox_port, sandbox_file, log_dir / "sandbox-latency.log") as box,
        cluster_child(env, log_dir / "qcluster-latency.log"),
    ):
        box.wait_answers(f"{sandbox_url}/_sandbox/stats", timeout=30)
        _deliver(20, "LW", reviewer, timeout=120)  # warm up
        source = "delivery section of this run"
        if not capacity_per_s:
            capacity_per_s = _deliver(args.deliveries, "LC", reviewer, timeout)["confirmed_per_s"]
            source = f"a burst of {args.deliveries} measured in this section"
        offered = getattr(args, "latency_rate", None) or capacity_per_s / 2
        count = max(20, round(offered * args.latency_seconds))
        rows = data.enquiries(count, prefix="L", state="ready_for_review")
        approved_at, lags = _approve_on_schedule(rows, offered, reviewer, args.latency_approvers)
        late = sum(1 for lag in lags if lag > LATE_AFTER_SECONDS)
        started = min(at for at, _ in approved_at.values())
        offered_seconds = max(at for at, _ in approved_at.values()) - started
        wait_until(
            lambda: _confirmed("L") >= count, timeout=timeout, interval=0.2, what="latency run"
        )
    confirmed_at = dict(
        Operation.objects.filter(
            pk__in=list(approved_at), state=OperationState.CONFIRMED
        ).values_list("pk", "state_changed_at")
    )
    latencies = [
        (confirmed_at[pk] - at).total_seconds() * 1000 for pk, (_, at) in approved_at.items()
    ]
    achieved = (count - 1) / offered_seconds if offered_seconds else 0.0
    return {
        "capacity_per_s": round(capacity_per_s, 1),
        "capacity_from": source,
        "offered_per_s": round(offered, 1),
        "offered_from": "--latency-rate"
        if getattr(args, "latency_rate", None)
        else f"half of {capacity_per_s:.0f}/s",
        # What the approvers achieved: the approvals over the time from the first to the last
        # (count - 1 intervals), beside the rate offered; and how far behind schedule they ran.
        "achieved_offered_per_s": round(achieved, 1),
        # Whether the p99 below is the offered rate's; when False it is the achieved rate's.
        "offered_met": achieved >= MET_SHARE * offered and late <= LATE_SHARE * count,
        "approvers": args.latency_approvers,
        "approvals_behind_schedule": late,
        "late_after_ms": LATE_AFTER_SECONDS * 1000,
        "lag_p99_ms": round(percentile(lags, 99) * 1000, 1),
        "count": count,
        "p50_ms": round(percentile(latencies, 50), 1),
        "p90_ms": round(percentile(latencies, 90), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1),
        "q_workers": args.q_workers,
        "q_poll": float(env.get("Q_POLL") or 0.2),
    }
