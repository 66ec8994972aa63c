"""The operators' digest (recovery.notices): one person's batched message built from N unresolved
notices (default 10,000), beside a bare SELECT of the same N rows in the same run.

Each run makes the N notices (bulk_create), then times ``recovery.notices.send``: it reads the
person's pending notices, builds the message's payload, proposes and enqueues the notify.send
operation and marks the notices, in one transaction. The baseline reads the same rows with one
SELECT through a plain cursor (no ORM objects). Both are in-process, against the bench database;
nothing is delivered (no cluster runs).
"""

from __future__ import annotations

import time
from datetime import timedelta

from bench.common import CpuMeter, median, median_cpu, postmaster_pid, ratio

TARGET_SECONDS = 1.0


def _notices(user, count: int, run: int, now):
    from recovery.models import OperatorNotice

    OperatorNotice.objects.bulk_create(
        [
            OperatorNotice(
                user=user,
                kind=OperatorNotice.OVERDUE,
                key=f"bench:{run}:{n}",
                title=f"Enquiry B{run}-{n:06d} has been waiting for review for 3 hours",
                link=f"/console/enquiries/{n}/",
                created_at=now - timedelta(seconds=n % 3600),
            )
            for n in range(count)
        ],
        batch_size=5000,
    )


def _bare_select(user) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, kind, key, title, link, created_at FROM recovery_operatornotice"
            " WHERE user_id = %s AND operation_id IS NULL ORDER BY created_at, id",
            [user.pk],
        )
        return len(cursor.fetchall())


def measure(db_url: str, args) -> dict:
    from django.utils import timezone

    from bench import data
    from ledger.integrations import ensure_integrations
    from recovery import notices

    ensure_integrations()
    person = data.user("reviewer", "digest-bench")
    person.email = "digest-bench@example.org"
    person.save(update_fields=["email"])
    count = args.digest_items
    postmaster = postmaster_pid(db_url)
    roots = {"postgres": postmaster} if postmaster else {}
    runs = []
    for run in range(args.runs):
        now = timezone.now() + timedelta(hours=run)  # a new interval per run: one message each
        _notices(person, count, run, now)
        started = time.perf_counter()
        selected = _bare_select(person)
        select_s = time.perf_counter() - started
        with CpuMeter(roots) as cpu:
            started = time.perf_counter()
            sent = notices.send(now)
            build_s = time.perf_counter() - started
        if len(sent) != 1 or selected != count:
            raise RuntimeError(f"digest run {run}: {len(sent)} message(s), {selected} rows read")
        carried = sent[0].payload.get("count")
        if carried != count:
            raise RuntimeError(f"digest run {run}: the message counts {carried}, not {count}")
        runs.append({"build_s": build_s, "select_s": select_s, "cpu": cpu.ms_per(1)})
    build = median([r["build_s"] for r in runs])
    select = median([r["select_s"] for r in runs])
    return {
        "items": count,
        "build_ms": round(build * 1000, 1),
        "select_ms": round(select * 1000, 1),
        # How many times the bare SELECT the build takes (1.0 would be the read alone).
        "times_select": ratio(build, select),
        "target_ms": TARGET_SECONDS * 1000,
        "cpu_ms": median_cpu(runs, "cpu"),
        "build_ms_by_run": [round(r["build_s"] * 1000, 1) for r in runs],
    }
