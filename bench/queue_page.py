"""The queue page (/console/) at size: render time and query count, and the plans behind them.

Rows are made with bulk_create, growing in steps (10k, 100k, 1M operations by default), so one
run shows how the cost grows. At each step a tenth of the work is unresolved: operations
`unknown` or `failed` (90%), enquiries waiting for information (5%), enquiries whose
classification is unresolved (5%); the other operations are `confirmed`, four per enquiry, as
delivered work piles up in production. The page is rendered in this process through Django's
test client (middleware, view, templates, one coordinator logged in), first page and a filtered
page; the query plans at the largest size are written to results/queue_plans.txt.
"""

from __future__ import annotations

import random
import re
import time
from datetime import timedelta

from bench.common import median, percentile

BATCH = 5000
ACTIONS = ("crm.create_enquiry", "notify.send", "suggest.category", "documents.extract")
FIRST_URL = "/console/"
FILTERED_URL = "/console/?state=unknown&integration=crm"
# Issue 19: sorted by last attempt, and one group of what failed the same way opened (every
# page also counts the groups for its "Failing the same way" panel).
SORTED_URL = "/console/?sort=attempt"
GROUP_URL = "/console/?group=crm~failed~retry_budget_exhausted~transient~503&sort=due"
PAGES = (
    ("first", FIRST_URL),
    ("filtered", FILTERED_URL),
    ("sorted", SORTED_URL),
    ("group", GROUP_URL),
)


class Generator:
    """Adds rows until the database holds the asked-for totals (so steps build on each other)."""

    def __init__(self, seed: int = 7, processes: int = 2):
        from django.utils import timezone

        self.seed = seed
        self.processes = processes
        self.rng = random.Random(seed)
        self.now = timezone.now()
        self.operations = 0
        self.unresolved = 0
        self.enquiries = 0
        self.sequence = 0  # the last enquiry reference number handed out
        self.integrations = {}
        self.owners = []
        self.seconds = 0.0

    def prepare(self):
        from bench import data
        from ledger.integrations import ensure_integrations
        from recovery.models import Queue, ResponsePolicy

        self.integrations = ensure_integrations()
        # One paused integration: the queue shows its backlog row and counts its held writes.
        paused = self.integrations["documents"]
        paused.paused, paused.paused_at = True, self.now - timedelta(hours=3)
        paused.pause_reason = "bench: the document store is down"
        paused.save()
        self.owners = [data.user("coordinator", f"bench-coordinator-{i}") for i in range(3)]
        admin = data.user("admin", "bench-admin")
        periods = [
            (Queue.UNKNOWN, None, timedelta(hours=2)),
            (Queue.FAILED, None, timedelta(hours=4)),
            (Queue.FAILED, self.integrations["notify"], timedelta(hours=8)),
            (Queue.SUBMISSION_UNKNOWN, None, timedelta(hours=2)),
            (Queue.NEEDS_INFORMATION, None, timedelta(days=2)),
            (Queue.UNRESOLVED, None, timedelta(hours=4)),
            (Queue.PAUSED, None, timedelta(hours=1)),
            ("", None, timedelta(days=1)),
        ]
        for queue, integration, period in periods:
            ResponsePolicy.objects.update_or_create(
                queue=queue,
                integration=integration,
                defaults={
                    "owner": self.owners[0],
                    "backup_owner": admin,
                    "response_period": period,
                },
            )
        return self.owners[0]

    def _since(self):
        # Spread over the last 30 days: some rows overdue, some not yet.
        return self.now - timedelta(seconds=self.rng.randrange(60, 30 * 24 * 3600))

    def grow(self, operations: int, unresolved: int):
        started = time.perf_counter()
        add_unresolved = max(0, unresolved - self.unresolved)
        ops_unresolved = round(add_unresolved * 0.9)
        info = round(add_unresolved * 0.05)
        unclassified = add_unresolved - ops_unresolved - info
        confirmed = max(0, operations - self.operations - ops_unresolved)
        self._unresolved_operations(ops_unresolved)
        self._waiting_enquiries("needs_information", info)
        self._waiting_enquiries("ready_for_review", unclassified)
        self._confirmed_operations(confirmed)
        self.operations += ops_unresolved + confirmed
        self.unresolved += add_unresolved
        from django.db import connection

        from intake.models import Enquiry

        self.enquiries = Enquiry.objects.count()

        with connection.cursor() as cursor:
            # What autovacuum would have done by the time a person opens the page.
            cursor.execute("VACUUM ANALYZE ledger_operation")
            cursor.execute("VACUUM ANALYZE intake_enquiry")
            cursor.execute("VACUUM ANALYZE ledger_attempt")
        self.seconds += time.perf_counter() - started

    def _enquiry_rows(self, count, state, **fields):
        from intake.models import Enquiry

        rows = []
        for _ in range(count):
            self.sequence += 1
            since = self._since()
            rows.append(
                Enquiry(
                    reference=f"Q-{self.sequence}",
                    source="bench",
                    name="A Resident",
                    email=f"resident{self.sequence % 5000}@example.org",
                    message="My bin was not collected on Tuesday.",
                    state=state,
                    created_at=since,
                    state_changed_at=since,
                    **fields,
                )
            )
        Enquiry.objects.bulk_create(rows, batch_size=BATCH)
        return rows

    def _op(self, enquiry, action, state, since, **fields):
        from ledger.models import Operation

        integration = {
            "crm.create_enquiry": "crm",
            "notify.send": "notify",
            "documents.extract": "documents",
        }.get(action)
        return Operation(
            enquiry=enquiry,
            action=action,
            revision=1,
            idempotency_key=f"{enquiry.pk}:{action}:r1",
            payload={"reference": enquiry.reference},
            payload_hash="0" * 64,
            integration=self.integrations[integration] if integration else None,
            state=state,
            attempt_count=1,
            budget_used=1,
            created_at=since,
            state_changed_at=since,
            **fields,
        )

    def _unresolved_operations(self, count):
        from ledger.models import Attempt, Operation

        for start in range(0, count, BATCH):
            n = min(BATCH, count - start)
            kinds = [self.rng.random() for _ in range(n)]
            states = ["submission_unknown" if k < 0.5 else "approved" for k in kinds]
            enquiries = []
            for state in ("submission_unknown", "approved"):
                enquiries += self._enquiry_rows(states.count(state), state, approved_revision=1)
            ops = []
            for i, enquiry in enumerate(enquiries):
                unknown = enquiry.state == "submission_unknown"
                action = "crm.create_enquiry" if unknown or i % 3 else "notify.send"
                owner = self.rng.choice(self.owners) if self.rng.random() < 0.3 else None
                ops.append(
                    self._op(
                        enquiry,
                        action,
                        "unknown" if unknown else "failed",
                        enquiry.state_changed_at,
                        owner=owner,
                        attention="" if unknown else "retry_budget_exhausted",
                        last_error_class="uncertain" if unknown else "transient",
                        last_error_status=None if unknown else 503,
                        last_attempted_at=enquiry.state_changed_at
                        - timedelta(seconds=self.rng.randrange(0, 7200)),
                    )
                )
            Operation.objects.bulk_create(ops, batch_size=BATCH)
            Attempt.objects.bulk_create(
                (
                    Attempt(
                        operation=op,
                        number=1,
                        worker="system:bench",
                        started_at=op.state_changed_at,
                        ended_at=op.state_changed_at,
                        outcome="uncertain" if op.state == "unknown" else "transient",
                        response_status=None if op.state == "unknown" else 503,
                    )
                    for op in ops
                ),
                batch_size=BATCH,
            )

    def _waiting_enquiries(self, state, count):
        for start in range(0, count, BATCH):
            self._enquiry_rows(min(BATCH, count - start), state)

    def _confirmed_operations(self, count):
        """Delivered work, in ``processes`` forked children at once: bulk_create spends its time
        in Python (preparing every field of every row), so two cores make it twice as fast."""
        import multiprocessing

        from django.db import connections

        chunks = [
            (self.sequence + start, min(BATCH * 4, count - start))
            for start in range(0, count, BATCH * 4)
        ]
        self.sequence += count  # each chunk numbers its references inside its own range
        connections.close_all()  # never share a connection with a forked child
        context = multiprocessing.get_context("fork")
        with context.Pool(self.processes) as pool:
            pool.starmap(_confirmed_chunk, [(first, n, self.seed + first) for first, n in chunks])


def _confirmed_chunk(first_reference: int, count: int, seed: int):
    """In a child: ``count`` confirmed operations, four per enquiry (references from ``first``)."""
    from ledger.models import Operation

    generator = Generator(seed=seed)
    generator.integrations = _integrations()
    generator.sequence = first_reference
    per = len(ACTIONS)
    for start in range(0, count, BATCH):
        n = min(BATCH, count - start)
        enquiries = generator._enquiry_rows(-(-n // per), "confirmed")
        ops = [
            generator._op(e, action, "confirmed", e.state_changed_at, external_id="crm_x")
            for e in enquiries
            for action in ACTIONS
        ][:n]
        Operation.objects.bulk_create(ops, batch_size=BATCH)
    from django.db import connections

    connections.close_all()


def _integrations():
    from ledger.models import Integration

    return {row.name: row for row in Integration.objects.all()}


def _render(client, url, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{url} answered {response.status_code}")
    return times


def _queries(client, url):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}")
    kinds = re.findall(rb'<tr class="[^"]*" data-kind="([a-z]+)"', response.content)
    return list(captured.captured_queries), [kind.decode() for kind in kinds]


def measure_step(client, samples: int) -> dict:
    result = {}
    for name, url in PAGES:
        # One render first, as a coordinator paging through the queue has: after a pause (the
        # rows of a step take minutes to make) the middleware stamps the session's activity,
        # at most every 30 seconds (config.security), three statements of its own.
        _render(client, url, 1)
        queries, kinds = _queries(client, url)
        _render(client, url, 2)  # warm caches after the query capture
        times = _render(client, url, samples)
        result[name] = {
            "url": url,
            "rows": len(kinds),
            # Which kinds of row the page shows: attach() reads each kind shown once.
            "kinds": {kind: kinds.count(kind) for kind in sorted(set(kinds))},
            "queries": len(queries),
            "p50_ms": round(median(times), 1),
            "p95_ms": round(percentile(times, 95), 1),
            "sql_ms": round(sum(float(q["time"]) for q in queries) * 1000, 1),
        }
    return result


def explain(client, path) -> dict:
    """EXPLAIN (ANALYZE, BUFFERS) every SELECT of both pages; which scans touch big tables."""
    from django.db import connection

    lines = []
    seq_scans, indexes = set(), set()
    for name, url in PAGES:
        queries, _kinds = _queries(client, url)
        for number, query in enumerate(queries, 1):
            sql = query["sql"]
            # The page's union starts with "(SELECT": keep every read, skip writes.
            if not sql.lstrip(" (").upper().startswith(("SELECT", "WITH")):
                continue
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            lines += [f"--- {name} page, query {number} ({query['time']}s)", sql, plan, ""]
            for match in re.finditer(r"Seq Scan on (\w+)", plan):
                seq_scans.add(match.group(1))
            for match in re.finditer(r"Index (?:Only )?Scan (?:Backward )?using (\w+)", plan):
                indexes.add(match.group(1))
            for match in re.finditer(r"Bitmap Index Scan on (\w+)", plan):
                indexes.add(match.group(1))
    path.write_text("\n".join(lines))
    big = {"ledger_operation", "intake_enquiry", "ledger_attempt", "ledger_journalentry"}
    return {
        "file": str(path.name),
        "indexes_used": sorted(indexes),
        "seq_scans": sorted(seq_scans),
        "seq_scans_on_big_tables": sorted(seq_scans & big),
    }


def measure(args, results_dir) -> dict:
    from django.test import Client

    top = args.queue_operations
    ratio_unresolved = args.queue_unresolved / top if top else 0.1
    steps = [s for s in (10_000, 100_000, 1_000_000) if s < top] + [top]
    generator = Generator()
    coordinator = generator.prepare()
    client = Client()
    client.force_login(coordinator)
    scaling = []
    for operations in steps:
        unresolved = round(operations * ratio_unresolved)
        generator.grow(operations, unresolved)
        measured = measure_step(client, args.page_samples)
        scaling.append(
            {
                "operations": generator.operations,
                "unresolved": generator.unresolved,
                "enquiries": generator.enquiries,
                **{f"{k}_{m}": v[m] for k, v in measured.items() for m in ("p50_ms", "p95_ms")},
                "queries_first": measured["first"]["queries"],
                "queries_filtered": measured["filtered"]["queries"],
                "queries_sorted": measured["sorted"]["queries"],
                "queries_group": measured["group"]["queries"],
                "pages": measured,
            }
        )
        print(
            f"  queue page at {generator.operations:,} operations: "
            f"first p95 {measured['first']['p95_ms']} ms, "
            f"filtered p95 {measured['filtered']['p95_ms']} ms, "
            f"sorted p95 {measured['sorted']['p95_ms']} ms, "
            f"group p95 {measured['group']['p95_ms']} ms; "
            f"queries {[measured[k]['queries'] for k, _url in PAGES]}",
            flush=True,
        )
    plans = explain(client, results_dir / "queue_plans.txt")
    last = scaling[-1]
    return {
        "operations": last["operations"],
        "unresolved": last["unresolved"],
        "p50_ms": last["pages"]["first"]["p50_ms"],
        "p95_ms": last["pages"]["first"]["p95_ms"],
        "filtered_p50_ms": last["pages"]["filtered"]["p50_ms"],
        "filtered_p95_ms": last["pages"]["filtered"]["p95_ms"],
        "queries_first": last["queries_first"],
        "queries_filtered": last["queries_filtered"],
        "sorted_p95_ms": last["pages"]["sorted"]["p95_ms"],
        "group_p95_ms": last["pages"]["group"]["p95_ms"],
        "queries_sorted": last["queries_sorted"],
        "queries_group": last["queries_group"],
        "queries_constant": len(
            {
                (s["queries_first"], s["queries_filtered"], s["queries_sorted"], s["queries_group"])
                for s in scaling
            }
        )
        == 1,
        "samples": args.page_samples,
        "generation_seconds": round(generator.seconds, 1),
        "plans": plans,
        "scaling": scaling,
    }
