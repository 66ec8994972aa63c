"""The console's enquiry search at 200,000 enquiries: the migration that makes the search
vector again, each query's time, and the plans that show the index is read.

    python bench/search.py                  # 200,000 enquiries (bench/search_data.sql)
    python bench/search.py --runs 3

A database of its own (``handover_search_<pid>``, dropped at the end) on the configured server
(DATABASE_URL, else the embedded one under var/pgdata). Steps: migrate everything, step intake
back to 0005 (the search before accents and prefixes), load bench/search_data.sql, time
``migrate intake`` forward (the table is rewritten), then time the enquiry page's queries
(references, the capped count, the page's rows: the same calls as
``recovery.views.queue.enquiry_list``) for each query, median of ``--runs``, and print
``EXPLAIN ANALYZE`` of the page and the count. docs/benchmarks.md keeps the figures.
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
PLANS = ("kowalska", "kow", "bro", "anna.kowalska20@example.org", "zebra")


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


def page_queries(q: str):
    """What the enquiry page runs for ``q``: (references, count, rows, the page's queryset)."""
    from intake.models import Enquiry
    from recovery.views.common import CappedPaginator
    from recovery.views.queue import FEW_MATCHES, SEARCH_PAGE_SIZE, search, sorted_matches

    references, words = search(Enquiry.objects.select_related("category", "owner"), q)
    paginator = CappedPaginator(words, SEARCH_PAGE_SIZE, cap=10_000)
    page = paginator.page(1)
    rows = page.object_list
    if paginator.count <= FEW_MATCHES:
        rows = sorted_matches(words, page)
    rows = list(rows)
    return references, paginator.counted, rows, words, page, paginator


def explain(queryset) -> str:
    from django.db import connection

    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs per query (the median is kept)")
    args = p.parse_args(argv)

    server = common.server_url()
    name = f"handover_search_{os.getpid()}"
    url = common.recreate_database(server, name)
    try:
        manage(url, "migrate", "--noinput")
        manage(url, "migrate", "intake", "0005", "--noinput")
        import psycopg

        started = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            # A fresh database holds no enquiries: its TRUNCATE ... CASCADE would only meet the
            # journal's append-only trigger.
            sql = (ROOT / "bench" / "search_data.sql").read_text()
            conn.execute(sql.replace("TRUNCATE intake_enquiry CASCADE;", ""))
        print(f"loaded 200,000 enquiries at intake 0005 in {time.perf_counter() - started:.1f} s")
        seconds = manage(url, "migrate", "intake", "--noinput")
        print(f"migrate intake (the search vector made again, its index built): {seconds:.1f} s")

        common.setup_django(url)
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE intake_enquiry")
            cursor.execute(
                "SELECT pg_size_pretty(pg_relation_size('enquiry_search')),"
                " pg_size_pretty(pg_relation_size('intake_enquiry'))"
            )
            gin, heap = cursor.fetchone()
        print(f"index enquiry_search {gin}, table {heap}\n")
        print(f"{'query':32} {'refs':>5} {'matches':>8} {'rows':>5} {'median ms':>10}  runs (ms)")
        for q in QUERIES:
            times = []
            for _ in range(args.runs):
                started = time.perf_counter()
                references, counted, rows, *_ = page_queries(q)
                times.append((time.perf_counter() - started) * 1000)
            matches = "10,000+" if counted > 10_000 else f"{counted:,}"
            runs = ", ".join(f"{t:.0f}" for t in times)
            print(
                f"{q:32} {len(references):>5} {matches:>8} {len(rows):>5} "
                f"{common.median(times):>10.1f}  {runs}"
            )
        for q in PLANS:
            _refs, counted, _rows, words, page, paginator = page_queries(q)
            from recovery.views.queue import FEW_MATCHES, sorted_matches

            rows = sorted_matches(words, page) if paginator.count <= FEW_MATCHES else words[:50]
            print(f"\n=== {q!r}: the page's rows ===\n{explain(rows)}")
            print(f"\n=== {q!r}: the count ===\n{explain(words.order_by()[:10_001])}")
        common.close_django_connections()
    finally:
        common.drop_database(server, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
