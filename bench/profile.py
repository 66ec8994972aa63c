"""Where the time goes: a bench section under a sampling profiler, with PostgreSQL's statements.

    python bench/profile.py --only intake --quick      # then the tables for docs/benchmarks.md
    python bench/profile.py --only delivery --events 400 --deliveries 300

Starts a PostgreSQL of its own (the system's binaries, initdb into a throwaway directory, a free
port, ``pg_stat_statements`` preloaded: the shared server is not restarted for it), runs
``bench/run.py`` with the remaining arguments under ``py-spy record --subprocesses`` (every
Python process of the run: the bench, the web servers, the cluster and its workers, the sandbox),
then prints, per process kind, the functions the samples were in (self time) and the product's
own frames (inclusive: a sample counts for the innermost intake/ledger/recovery/config frame on
its stack), and the statements of the section's database with their calls and execution time
per unit (per intake request; per confirmed operation for delivery and reconciliation).

The raw samples stay in var/bench/profile/<section>.folded (collapsed stacks, for a flame graph).
py-spy is in requirements-dev.txt.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.processes import free_port  # noqa: E402

PG_BIN = Path("/usr/lib/postgresql")
PRODUCT = ("intake/", "ledger/", "recovery/", "config/")
PROCESS = re.compile(r'process (\d+):"(.*?)"(?:;|$)', re.S)
CEILING_ROLE = "bench_ceiling"
# Samples in these (self) frames wait: for work (an idle thread, the server's poll), for
# PostgreSQL, for the network. Counted apart from the CPU the process spends.
WAITING = (
    "Condition.wait",
    "poll2",
    "poll (",
    "select (",
    "sleep (",
    "Event.wait",
    "SocketIO.readinto",
    "_recv",
    "accept (",
    "lock.acquire",
    "Queue.get",
)
ON_POSTGRES = ("Connection.wait",)
TOP = 8


# --- a PostgreSQL of our own ----------------------------------------------------------------


def _bin(name: str) -> str:
    found = sorted(PG_BIN.glob(f"*/bin/{name}"))
    if not found:
        raise SystemExit(f"profile: no {name} under {PG_BIN} (PostgreSQL server binaries)")
    return str(found[-1])


def _as_postgres(command: list[str]) -> list[str]:
    """Root cannot run initdb/postgres: run them as the postgres user."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


class OwnServer:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="handover-profile-pg-"))
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        subprocess.run(
            [
                *_as_postgres([_bin("initdb"), "-D", str(self.dir / "data"), "-U", "postgres"]),
                "--auth=trust",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
            " -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top"
            " -c pg_stat_statements.max=5000 -c pg_stat_statements.track_planning=on"
        )
        subprocess.run(
            [
                *_as_postgres([_bin("pg_ctl"), "-D", str(self.dir / "data"), "-w", "-o", options]),
                "-l",
                str(self.dir / "server.log"),
                "start",
            ],
            check=True,
            capture_output=True,
        )
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {CEILING_ROLE} LOGIN SUPERUSER")

    def stop(self):
        subprocess.run(
            _as_postgres([_bin("pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


# --- the samples ----------------------------------------------------------------------------


def kind_of(labels: list[str]) -> str:
    """The process kind of a sample, from its process chain (innermost first)."""
    for cmdline in reversed(labels):
        if "bench.ceiling" in cmdline:
            return "ceiling web"
        if "config.serve" in cmdline or "gunicorn" in cmdline:
            return "web"
        if "qcluster" in cmdline:
            return "cluster"
        if "sandbox" in cmdline:
            return "sandbox"
        if "bench/run.py" in cmdline:
            return "bench"
    return "other"


def _short(frame: str) -> str:
    """'func (path:line)' -> 'func (package/module.py)'."""
    match = re.match(r"(.*) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    func, path = match.groups()
    for marker in ("site-packages/", "python3.11/", str(ROOT) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{func} ({path})"


def summarise_samples(folded: Path) -> dict:
    self_time: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    product: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    busy: collections.Counter = collections.Counter()
    waits: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in folded.read_text(errors="replace").split("\n"):
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        labels = [m.group(2) for m in PROCESS.finditer(stack)]
        frames_text = PROCESS.sub("", stack)
        frames = [f for f in frames_text.split(";") if f]
        if not frames or not count.isdigit():
            continue
        n = int(count)
        kind = kind_of(labels)
        totals[kind] += n
        leaf = _short(frames[-1])
        if any("_find_and_load" in f for f in frames):
            waits[kind]["start-up (imports)"] += n
            continue
        if any(w in leaf for w in ON_POSTGRES):
            waits[kind]["waiting for PostgreSQL"] += n
            continue
        if any(w in leaf for w in WAITING):
            waits[kind]["idle or waiting for the network"] += n
            continue
        busy[kind] += n
        self_time[kind][leaf] += n
        owned = [f for f in frames if any(f"({ROOT}/{p}" in f or f"({p}" in f for p in PRODUCT)]
        product[kind][_short(owned[-1]) if owned else "(no product frame)"] += n

    def shares(counter, whole):
        return (
            [(f, round(100 * n / whole, 1)) for f, n in counter.most_common(TOP)] if whole else []
        )

    return {
        kind: {
            "samples": totals[kind],
            "busy": busy[kind],
            "waits": shares(waits[kind], totals[kind]),
            # Shares of the busy samples (those not waiting nor importing).
            "self": shares(self_time[kind], busy[kind]),
            "product": shares(product[kind], busy[kind]),
        }
        for kind in sorted(totals, key=totals.get, reverse=True)
    }


# --- the statements -------------------------------------------------------------------------


def statements(url: str, database: str, units: int) -> list[dict]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = conn.execute(
            "SELECT s.query, s.calls, s.total_exec_time, s.rows, s.total_plan_time"
            " FROM pg_stat_statements s"
            " JOIN pg_database d ON d.oid = s.dbid JOIN pg_roles r ON r.oid = s.userid"
            " WHERE d.datname = %s AND r.rolname = 'postgres' AND s.query NOT LIKE '%%bench_raw%%'"
            " ORDER BY s.total_exec_time DESC",
            [database],
        ).fetchall()
    out = []
    for query, calls, total_ms, count, plan_ms in rows:
        per_unit = calls / units if units else 0.0
        if per_unit < 0.05:
            continue  # the bench's own set-up and counting, not the path under test
        out.append(
            {
                "query": " ".join(query.split())[:160],
                "calls_per_unit": round(per_unit, 2),
                "exec_ms_per_unit": round(total_ms / units, 3),
                "plan_ms_per_unit": round(plan_ms / units, 3),
                "rows_per_call": round(count / calls, 1) if calls else 0,
            }
        )
    return out


def units_of(section: str, url: str, results: dict) -> tuple[int, str]:
    import psycopg

    if section == "intake":
        i = results["intake"]
        settings = results["settings"]
        warm = settings["senders"] * settings["web_workers"] * 4
        return i["requests_per_run"] * settings["runs"] + warm, "intake request"
    with psycopg.connect(url, autocommit=True) as conn:
        (confirmed,) = conn.execute(
            "SELECT count(*) FROM ledger_operation WHERE state = 'confirmed'"
        ).fetchone()
    return confirmed, "confirmed operation"


def render(section: str, samples: dict, statements_: list[dict], units: int, unit: str) -> str:
    lines = [f"## {section}: {units} units ({unit})", ""]
    for kind, s in samples.items():
        if kind not in ("web", "ceiling web", "cluster"):
            continue  # the load (bench), the sandbox: not Handover's cost
        waits = ", ".join(f"{what} {share}%" for what, share in s["waits"])
        lines += [
            f"### {kind}: {s['samples']} samples, {s['busy']} busy",
            "",
            f"Not busy: {waits}. Shares below are of the busy samples.",
            "",
            "| self | % | product frame (inclusive) | % |",
        ]
        lines.append("|---|---|---|---|")
        for (f1, p1), (f2, p2) in zip(s["self"], s["product"], strict=False):
            lines.append(f"| `{f1}` | {p1} | `{f2}` | {p2} |")
        lines.append("")
    lines += [
        f"### PostgreSQL: statements per {unit}",
        "",
        "| statement | calls | exec ms | plan ms | rows/call |",
        "|---|---|---|---|---|",
    ]
    for row in statements_[:40]:
        query = row["query"].replace("|", "\\|")
        lines.append(
            f"| `{query}` | {row['calls_per_unit']} | {row['exec_ms_per_unit']} |"
            f" {row['plan_ms_per_unit']} | {row['rows_per_call']} |"
        )
    total_calls = sum(r["calls_per_unit"] for r in statements_)
    total_ms = sum(r["exec_ms_per_unit"] for r in statements_)
    plan_ms = sum(r["plan_ms_per_unit"] for r in statements_)
    lines += [
        "",
        f"All statements per {unit}: {total_calls:.1f} calls, {total_ms:.2f} ms exec,"
        f" {plan_ms:.2f} ms planning.",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", required=True, choices=("intake", "delivery", "reconciliation"))
    p.add_argument("--rate", type=int, default=67, help="py-spy samples per second")
    args, rest = p.parse_known_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out_dir = ROOT / "var" / "bench" / "profile"
    out_dir.mkdir(parents=True, exist_ok=True)
    folded = out_dir / f"{args.only}.folded"
    results_path = out_dir / f"{args.only}.json"
    database = "handover_bench_profile"
    server = OwnServer()
    try:
        env = {**os.environ, "DATABASE_URL": server.url, "BENCH_CEILING_ROLE": CEILING_ROLE}
        command = [sys.executable, "bench/run.py", "--only", args.only, *rest]
        command += ["--bench-database", database, "--keep-database", "--json", str(results_path)]
        subprocess.run(
            [
                spy,
                "record",
                "--subprocesses",
                "--format",
                "raw",
                "--rate",
                str(args.rate),
                "-o",
                str(folded),
                "--",
                *command,
            ],
            cwd=ROOT,
            env=env,
            check=True,
        )
        results = json.loads(results_path.read_text())
        db_url = server.url.rsplit("/", 1)[0] + "/" + database
        units, unit = units_of(args.only, db_url, results)
        report = render(
            args.only,
            summarise_samples(folded),
            statements(server.url, database, units),
            units,
            unit,
        )
    finally:
        server.stop()
    (out_dir / f"{args.only}.md").write_text(report + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
