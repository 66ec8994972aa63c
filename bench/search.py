"""The console's enquiry search at 1,000,000 enquiries: each query's time beside the target
(p95 < 150 ms), and the plans that show the indexes are read.

    python bench/search.py                          # 1,000,000 enquiries (bench/search_data.sql)
    python bench/search.py --enquiries 200000 --runs 5

A database of its own (``handover_search_<pid>``, dropped at the end) on the configured server
(DATABASE_URL, else the embedded one under var/pgdata). Steps: migrate everything, drop the GIN
index ``enquiry_search``, load bench/search_data.sql (``--enquiries`` rows, made by
generate_series in one INSERT), build the index again (timed), ``VACUUM ANALYZE``; then time the
enquiry page's queries (references, the capped count, the page's rows: the same calls as
``recovery.views.queue.enquiry_list``) for each query, ``--runs`` times each in turn after one
unmeasured round: median and p95 per query, and the p95 of every measured page. With
``--compare-cap N`` each page is also timed counting up to N instead of the view's
``SEARCH_COUNT_CAP``, alternately in the same run (the same-run baseline of a cap change). Then
``EXPLAIN (ANALYZE, BUFFERS)`` of the page and the count. The load average is printed at the
start and the end (the machine is shared). docs/benchmarks.md keeps the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common  # noqa: E402

QUERIES = (
    "anna.kowalska20@example.org",  # one e-mail address
    "kowalska",  # a surname, 6,667 of them
    "kowalská",  # the same, typed with an accent
    "kow",  # the start of the surname
    "anna kowalska",
    "bro",  # the start of "broken" and "brown"
    "heat",  # the start of "heating"
    "b",  # one letter: matched whole
    "example.org",  # the e-mail domain: every enquiry
    "bin",  # a common word
    "mould boiler",
    "ENQ-C4C0",  # the start of a reference
    "zebra",  # nothing
)
PLANS = (
    "kowalska",
    "anna kowalska",
    "kow",
    "bro",
    "anna.kowalska20@example.org",
    "zebra",
    "b",
    "ENQ-C4C0",
)
TARGET_P95_MS = 150


def manage(url: str, *args: str) -> float:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=common.child_env(url),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def page_queries(q: str, cap: int | None = None):
    """What the enquiry page runs for ``q``, counting up to ``cap`` (the view's
    SEARCH_COUNT_CAP by default): (references, count, the page's rows, the words' queryset, the
    page, the paginator, the page's queryset)."""
    from intake.models import Enquiry
    from recovery.views.common import CappedPaginator
    from recovery.views.queue import (
        FEW_MATCHES,
        SEARCH_COUNT_CAP,
        SEARCH_PAGE_SIZE,
        search,
        sorted_matches,
        walked_matches,
    )

    unsearched = Enquiry.objects.select_related("category", "owner")
    references, words = search(unsearched, q)
    paginator = CappedPaginator(words, SEARCH_PAGE_SIZE, cap=cap or SEARCH_COUNT_CAP)
    page = paginator.page(1)
    if paginator.counted <= FEW_MATCHES:
        rows = sorted_matches(words, page)
    else:
        rows = walked_matches(unsearched, q, references, page)
    return references, paginator.counted, list(rows), words, page, paginator, rows


def reference_query(q: str):
    """The references' query of ``q``, as ``recovery.views.queue.search`` builds it."""
    from intake.models import Enquiry
    from recovery.views.queue import reference_matches

    return reference_matches(Enquiry.objects.select_related("category", "owner"), q)


def explain_count(words) -> str:
    """EXPLAIN of the capped count's own statement (Django's count of a slice: a subquery that
    selects no columns)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from recovery.views.common import CappedPaginator
    from recovery.views.queue import SEARCH_COUNT_CAP, SEARCH_PAGE_SIZE

    with CaptureQueriesContext(connection) as captured:
        CappedPaginator(words, SEARCH_PAGE_SIZE, cap=SEARCH_COUNT_CAP).counted  # noqa: B018
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + captured.captured_queries[-1]["sql"])
        return "\n".join(row[0] for row in cursor.fetchall())


def explain(queryset) -> str:
    from django.db import connection

    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def percentile(values, fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


def load(url: str, enquiries: int) -> None:
    import psycopg

    # A fresh database holds no enquiries: its TRUNCATE ... CASCADE would only meet the
    # journal's append-only trigger.
    sql = (ROOT / "bench" / "search_data.sql").read_text()
    sql = sql.replace("TRUNCATE intake_enquiry CASCADE;", "").replace(":enquiries", str(enquiries))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--enquiries", type=int, default=1_000_000, help="enquiries to search")
    p.add_argument("--runs", type=int, default=10, help="measured runs per query")
    p.add_argument(
        "--compare-cap",
        type=int,
        help="also time each page counting up to this many (e.g. 10000), alternately",
    )
    p.add_argument(
        "--database",
        help="keep the data in this database (not dropped); a later run with the same name and"
        " --enquiries reuses it instead of loading again",
    )
    args = p.parse_args(argv)

    server = common.server_url()
    name = args.database or f"handover_search_{os.getpid()}"
    url = common.with_database(server, name)
    reuse = args.database and loaded(server, name) == args.enquiries
    if not reuse:
        url = common.recreate_database(server, name)
    print(f"load average at the start: {loadavg()}")
    try:
        if reuse:
            print(f"{args.enquiries:,} enquiries already in {name}: reused")
            return measure(url, args)
        manage(url, "migrate", "--noinput")
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            index = conn.execute("SELECT pg_get_indexdef('enquiry_search'::regclass)").fetchone()[0]
            conn.execute("DROP INDEX enquiry_search")
        started = time.perf_counter()
        load(url, args.enquiries)
        print(f"loaded {args.enquiries:,} enquiries in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SET maintenance_work_mem = '256MB'")
            conn.execute(index)
        print(f"index enquiry_search built in {time.perf_counter() - started:.1f} s")

        return measure(url, args, vacuum=True)
    finally:
        common.close_django_connections()
        if not args.database:
            common.drop_database(server, name)


def loaded(server: str, name: str) -> int | None:
    """How many enquiries database ``name`` holds (None: no such database)."""
    import psycopg

    try:
        with psycopg.connect(common.with_database(server, name)) as conn:
            return conn.execute("SELECT count(*) FROM intake_enquiry").fetchone()[0]
    except psycopg.Error:
        return None


def measure(url: str, args, vacuum: bool = False) -> int:
    common.setup_django(url)
    from django.db import connection

    with connection.cursor() as cursor:
        if vacuum:
            cursor.execute("VACUUM ANALYZE intake_enquiry")
        cursor.execute(
            "SELECT pg_size_pretty(pg_relation_size('enquiry_search')),"
            " pg_size_pretty(pg_relation_size('intake_enquiry'))"
        )
        gin, heap = cursor.fetchone()
    from recovery.views.queue import SEARCH_COUNT_CAP as cap

    print(f"index enquiry_search {gin}, table {heap}; load average {loadavg()}\n")
    caps = [cap] + ([args.compare_cap] if args.compare_cap else [])
    for q in QUERIES:  # one unmeasured round: the cache as a console in use has it
        for c in caps:
            page_queries(q, c)
    times = {(c, q): [] for c in caps for q in QUERIES}
    found = {}
    for run in range(args.runs):  # each query in turn, so the load's swings reach them all
        for q in QUERIES:
            for c in caps if run % 2 == 0 else caps[::-1]:  # the caps alternate who goes first
                started = time.perf_counter()
                references, counted, rows, *_ = page_queries(q, c)
                times[c, q].append((time.perf_counter() - started) * 1000)
                found[c, q] = (len(references), counted, len(rows))
    for c in caps:
        print(f"counting up to {c:,}{' (the view)' if c == cap else ''}:")
        print(
            f"{'query':32} {'refs':>5} {'matches':>8} {'rows':>5} {'median ms':>10}"
            f" {'p95 ms':>7}  runs (ms)"
        )
        for q in QUERIES:
            refs, counted, rows = found[c, q]
            matches = f"{c:,}+" if counted > c else f"{counted:,}"
            runs = ", ".join(f"{t:.0f}" for t in times[c, q])
            print(
                f"{q:32} {refs:>5} {matches:>8} {rows:>5} {common.median(times[c, q]):>10.1f} "
                f"{percentile(times[c, q], 0.95):>7.1f}  {runs}"
            )
        every = [t for (tc, _), ts in times.items() if tc == c for t in ts]
        p95 = percentile(every, 0.95)
        print(
            f"\nevery page ({len(every)}): median {common.median(every):.1f} ms, p95 {p95:.1f} ms,"
            f" worst {max(every):.1f} ms; target p95 < {TARGET_P95_MS} ms:"
            f" {'met' if p95 < TARGET_P95_MS else 'missed'}; load average {loadavg()}\n"
        )
    for q in PLANS:
        *_, words, _page, _paginator, rows = page_queries(q)
        print(f"\n=== {q!r}: the page's rows ===\n{explain(rows)}")
        print(f"\n=== {q!r}: the count ===\n{explain_count(words)}")
        print(f"\n=== {q!r}: the references ===\n{explain(reference_query(q))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
