"""`make bench`: Handover's speed beside the limits it runs against, measured in the same run.

    python bench/run.py                 # the full run (~10 minutes on 2 cores)
    python bench/run.py --quick         # a small smoke run (about a minute)
    python bench/run.py --only intake   # one section (repeat --only for several)
    python bench/run.py --only drain --only latency

Uses its own database (``handover_bench``) on the configured server (DATABASE_URL, else the
embedded one under var/pgdata): migrated fresh once into a template, each section starting
from a copy. gunicorn, the django-q2 cluster and the sandbox run as real child processes.
Writes bench/results/latest.json and prints a table; docs/benchmarks.md explains the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

SECTIONS = (
    "intake",
    "delivery",
    "reconciliation",
    "queue_page",
    "drain",
    "latency",
    "digest",
    "acknowledgement",
    "resident",
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--only", action="append", choices=SECTIONS, help="run only these sections")
    p.add_argument("--runs", type=int, default=3, help="runs per figure (the median is kept)")
    p.add_argument("--events", type=int, default=2000, help="intake requests per run")
    p.add_argument("--duplicate-rate", type=float, default=0.1, help="share of repeats")
    p.add_argument("--senders", type=int, default=8, help="concurrent intake senders")
    p.add_argument(
        "--web-server",
        choices=("serve", "gunicorn"),
        default="serve",
        help="serve: python -m config.serve (waitress, as make run); gunicorn: gthread, as before",
    )
    p.add_argument("--web-workers", type=int, default=2, help="web server processes")
    p.add_argument("--web-threads", type=int, default=4, help="threads per web process")
    p.add_argument("--deliveries", type=int, default=600, help="approved operations per run")
    p.add_argument("--reconciliations", type=int, default=600, help="unknown operations per run")
    p.add_argument(
        "--q-workers", type=int, default=4, help="django-q2 workers (Q_WORKERS; 4, the default)"
    )
    p.add_argument("--q-poll", type=float, default=None, help="Q_POLL for the cluster")
    p.add_argument("--drains", type=int, default=3000, help="held CRM writes released at once")
    p.add_argument(
        "--drain-rate",
        type=float,
        default=40.0,
        help="R: the CRM's limit, in Handover and at the sandbox; at most half of the delivery "
        "capacity measured in the same run",
    )
    p.add_argument(
        "--drain-clusters",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2],
        help="clusters draining at once, one drain each (comma-separated)",
    )
    p.add_argument(
        "--latency-seconds", type=float, default=20.0, help="how long the steady load is offered"
    )
    p.add_argument(
        "--latency-approvers",
        type=int,
        default=4,
        help="threads approving on schedule in the latency section (the offered rate is met)",
    )
    p.add_argument(
        "--acknowledgements",
        type=int,
        default=300,
        help="events in the burst that measures the e-mail acknowledgement's capacity",
    )
    p.add_argument(
        "--latency-rate",
        type=float,
        default=None,
        help="approvals/s offered in the latency section (default: half the delivery capacity)",
    )
    p.add_argument(
        "--resident-answers",
        type=int,
        default=300,
        help="resident page answers (and inbound replies) per run in the resident section",
    )
    p.add_argument(
        "--resident-clients", type=int, default=8, help="concurrent clients on the resident page"
    )
    p.add_argument("--digest-items", type=int, default=10_000, help="notices in one digest")
    p.add_argument("--queue-operations", type=int, default=1_000_000)
    p.add_argument("--queue-unresolved", type=int, default=100_000)
    p.add_argument("--page-samples", type=int, default=20, help="renders per page and size")
    p.add_argument("--json", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    p.add_argument(
        "--bench-database",
        default=common.BENCH_DB,
        help="database name (its template is <name>_template); dropped at the end",
    )
    p.add_argument("--keep-database", action="store_true", help="leave handover_bench behind")
    args = p.parse_args(argv)
    if args.quick:
        # Small sizes, unless a size was given on the command line too.
        quick = {
            "runs": 2,
            "events": 200,
            "deliveries": 40,
            "reconciliations": 40,
            "queue_operations": 2000,
            "queue_unresolved": 200,
            "page_samples": 5,
            "drains": 200,
            "latency_seconds": 5.0,
            "digest_items": 200,
            "acknowledgements": 30,
            "resident_answers": 30,
        }
        for name, value in quick.items():
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, value)
    return args


def _cpu(section: dict, key: str = "cpu_ms_per_op", unit: str = "op") -> str:
    """CPU milliseconds per operation (or request) by process (bench.common.CpuMeter)."""
    cpu = section.get(key) or {}
    parts = [f"{kind} {ms:.1f}" for kind, ms in cpu.items()]
    return (f"CPU ms/{unit}: " + ", ".join(parts)) if parts else ""


def _splits(i: dict) -> str:
    """p99 by run, each with how the senders' connections sat on the web workers (5/3...)."""
    splits = i.get("connections_per_worker") or []
    if not splits:
        return ""
    runs = [
        f"{p99:.0f} ms ({'/'.join(map(str, split)) if split else '?'})"
        for p99, split in zip(i.get("p99_ms_by_run", []), splits, strict=False)
    ]
    return "; p99 by run (connections per worker): " + ", ".join(runs)


def table(results: dict) -> str:
    rows = [("figure", "Handover", "baseline", "ratio", "detail")]
    i = results.get("intake")
    if i:
        rows.append(
            (
                "intake events/s",
                f"{i['events_per_s']:.0f}",
                f"{i['baseline_per_s']:.0f}",
                f"{i['ratio']:.2f}",
                f"p50 {i['p50_ms']:.1f} ms, p99 {i['p99_ms']:.1f} ms; "
                + _cpu(i, "cpu_ms_per_request", "request")
                + _splits(i),
            )
        )
        c = i.get("framework_ceiling")
        if c:
            rows.append(
                (
                    "  framework ceiling/s",
                    f"{c['per_s']:.0f}",
                    f"{i['baseline_per_s']:.0f}",
                    f"{c['ratio_to_baseline']:.2f}",
                    f"one INSERT per request; intake is {c['intake_share']:.2f} of it; "
                    + _cpu(c, "cpu_ms_per_request", "request"),
                )
            )
    d = results.get("delivery")
    if d:
        rows.append(
            (
                "delivery confirmed/s",
                f"{d['confirmed_per_s']:.0f}",
                f"{d['baseline_per_s']:.0f}",
                f"{d['ratio']:.2f}",
                f"duplicates {d['duplicates']}, missing {d['missing']}; {_cpu(d)}",
            )
        )
        floor = d.get("transport_floor")
        if floor:
            rows.append(
                (
                    "django-q2 no-op tasks/s",
                    f"{floor['tasks_per_s']:.0f}",
                    "",
                    "",
                    "the transport floor of a delivery; " + _cpu(floor, "cpu_ms_per_task", "task"),
                )
            )
        ceiling = d.get("ceiling")
        if ceiling:
            rows.append(
                (
                    "  delivery ceiling/s",
                    f"{ceiling['confirmed_per_s']:.0f}",
                    "",
                    "",
                    "claim, POST, outcome: one UPDATE each side, nothing of Handover's; "
                    + _cpu(ceiling),
                )
            )
    r = results.get("reconciliation")
    if r:
        rows.append(
            (
                "reconciled/s",
                f"{r['reconciled_per_s']:.0f}",
                f"{r['baseline_per_s']:.0f}",
                f"{r['ratio']:.2f}",
                _cpu(r),
            )
        )
    q = results.get("queue_page")
    if q:
        rows.append(
            (
                "queue page p95 (first)",
                f"{q['p95_ms']:.0f} ms",
                "",
                "",
                f"p50 {q['p50_ms']:.0f} ms, {q['queries_first']} queries, "
                f"{q['operations']:,} ops / {q['unresolved']:,} unresolved",
            )
        )
        rows.append(
            (
                "queue page p95 (filtered)",
                f"{q['filtered_p95_ms']:.0f} ms",
                "",
                "",
                f"p50 {q['filtered_p50_ms']:.0f} ms, {q['queries_filtered']} queries",
            )
        )
    dr = results.get("drain")
    if dr:
        rows.append(
            (
                "drain confirmed/s",
                f"{dr['rate_per_s']:.1f}",
                f"{dr['limit_per_s']:g} (limit)",
                f"{dr['ratio']:.2f}",
                f"R = min({dr['limit_asked_per_s']:g}, half of the capacity "
                f"{dr['capacity_per_s']:g}/s); max in any second {dr['max_in_any_second']}, "
                f"429s {dr['throttled']}, "
                f"duplicates {dr['duplicates']}, missing {dr['missing']}; "
                + ", ".join(
                    f"{r['clusters']} cluster(s): {r['rate_per_s']:.1f}/s" for r in dr["runs"]
                ),
            )
        )
    la = results.get("latency")
    if la:
        met = la.get("offered_met", True)
        rows.append(
            (
                "approval to confirmed p99"
                + (
                    "" if met else f" at {la['achieved_offered_per_s']:.1f}/s, NOT the offered rate"
                ),
                f"{la['p99_ms']:.0f} ms",
                "",
                "",
                f"p50 {la['p50_ms']:.0f} ms at {la['offered_per_s']:.1f}/s offered "
                f"({la['offered_from']}; capacity {la['capacity_per_s']:.0f}/s, "
                f"{la['capacity_from']}), "
                f"{la['achieved_offered_per_s']:.1f}/s achieved; "
                f"{la['approvals_behind_schedule']} of {la['count']} approvals started more than "
                f"{la['late_after_ms']:.0f} ms behind schedule (p99 lag {la['lag_p99_ms']:.0f} ms)",
            )
        )
    ack = results.get("acknowledgement")
    if ack:
        rows.append(
            (
                "intake to SMTP 250 p99",
                f"{ack['p99_ms']:.0f} ms",
                f"{ack['capacity_per_s']:.1f}/s (capacity)",
                f"{ack['achieved_per_s'] / ack['capacity_per_s']:.2f}"
                if ack["capacity_per_s"]
                else "",
                f"p50 {ack['p50_ms']:.0f} ms; {ack['offered_per_s']:.1f}/s offered, "
                f"{ack['achieved_per_s']:.1f}/s achieved, {ack['posts_behind_schedule']} of "
                f"{ack['count']} posts behind schedule; "
                f"target p99 < {ack['target_p99_ms']:.0f} ms; "
                f"duplicates {ack['duplicates']}, not 202 {ack['not_202']}",
            )
        )
    rs = results.get("resident")
    if rs:
        rows.append(
            (
                "resident page POST p99",
                f"{rs['page_p99_ms']:.0f} ms",
                f"{rs['baseline_p99_ms']:.0f} ms (bare view)",
                f"{rs['page_p99_ms'] / rs['baseline_p99_ms']:.1f}x"
                if rs["baseline_p99_ms"]
                else "",
                f"p50 {rs['page_p50_ms']:.0f} ms (bare view {rs['baseline_p50_ms']:.0f} ms); "
                f"{rs['answers_per_run']} answers from {rs['clients']} clients; "
                f"not 302 {rs['page_not_302']}, revisions missing {rs['page_revisions_missing']}; "
                + _cpu(rs, "page_cpu_ms_per_request", "answer"),
            )
        )
        web = rs["inbound_cpu_ms_per_message"].get("web", 0.0)
        bare = rs["baseline_cpu_ms_per_request"].get("web", 0.0)
        rows.append(
            (
                "inbound reply CPU/message",
                f"{web:.1f} ms (web)",
                f"{bare:.1f} ms (bare view)",
                f"{web / bare:.1f}x" if bare else "",
                f"one after another: p50 {rs['inbound_p50_ms']:.0f} ms, mean "
                f"{rs['inbound_mean_ms']:.0f} ms; not 200 {rs['inbound_not_200']}, revisions "
                f"missing {rs['inbound_revisions_missing']}; "
                + _cpu(rs, "inbound_cpu_ms_per_message", "message"),
            )
        )
    dg = results.get("digest")
    if dg:
        rows.append(
            (
                "operators' digest build",
                f"{dg['build_ms']:.0f} ms",
                f"{dg['select_ms']:.0f} ms (SELECT)",
                f"{dg['times_select']:.1f}x",
                f"{dg['items']:,} notices for one person; target < {dg['target_ms']:.0f} ms; "
                + _cpu(dg, "cpu_ms", "digest"),
            )
        )
    widths = [max(len(str(row[c])) for row in rows) for c in range(5)]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(str(v).ljust(widths[c]) for c, v in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    sections = args.only or list(SECTIONS)
    results_dir = args.json.parent
    results_dir.mkdir(parents=True, exist_ok=True)
    name = args.bench_database
    # Child logs and the sandbox's file, per database name so two runs never share them.
    log_dir = ROOT / "var" / "bench" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    server = common.server_url()
    template = f"{name}_template"
    print(f"bench: migrating a fresh template database ({template})", flush=True)
    common.migrate_template(server, log_dir, template)
    db_url = common.fresh_database(server, name, template)
    common.setup_django(db_url)
    results: dict = {
        "taken_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/run.py", *(argv or sys.argv[1:])]),
        "quick": args.quick,
        "machine": common.machine(),
        "postgres": common.postgres_info(db_url),
        "settings": {
            k: v
            for k, v in vars(args).items()
            if k not in ("json", "only", "keep_database", "bench_database")
        },
    }

    def fresh():
        common.close_django_connections()
        return common.fresh_database(server, name, template)

    try:
        if "intake" in sections:
            print("bench: intake", flush=True)
            from bench import intake

            results["intake"] = intake.measure(fresh(), args, log_dir)
        wanted = [s for s in ("delivery", "reconciliation") if s in sections]
        if wanted:
            print(f"bench: {' and '.join(wanted)}", flush=True)
            from bench import delivery

            results.update(delivery.measure(fresh(), args, log_dir, sections=wanted))
        if "drain" in sections:
            print("bench: drain", flush=True)
            from bench import drain

            capacity = (results.get("delivery") or {}).get("confirmed_per_s")
            results["drain"] = drain.measure_drain(fresh(), args, log_dir, capacity_per_s=capacity)
        if "latency" in sections:
            print("bench: latency", flush=True)
            from bench import drain

            capacity = (results.get("delivery") or {}).get("confirmed_per_s")
            results["latency"] = drain.measure_latency(
                fresh(), args, log_dir, capacity_per_s=capacity
            )
        if "acknowledgement" in sections:
            print("bench: the acknowledgement by e-mail", flush=True)
            from bench import acknowledgement

            results["acknowledgement"] = acknowledgement.measure(fresh(), args, log_dir)
        if "resident" in sections:
            print("bench: the resident's answer (page and inbound e-mail)", flush=True)
            from bench import resident_cost

            results["resident"] = resident_cost.measure(fresh(), args, log_dir)
        if "digest" in sections:
            print("bench: operators' digest", flush=True)
            from bench import digest

            results["digest"] = digest.measure(fresh(), args)
        if "queue_page" in sections:
            print("bench: queue page", flush=True)
            from bench import queue_page

            fresh()
            results["queue_page"] = queue_page.measure(args, results_dir)
    finally:
        common.close_django_connections()
        if not args.keep_database:
            common.drop_database(server, name)
        common.drop_database(server, template)
    results["seconds"] = round(time.perf_counter() - started, 1)
    args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print()
    print(table(results))
    print(f"\nwrote {args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
