"""An unrelated write's delay while one enquiry's eight hostile documents are read, beside a
same-run baseline with no reads.

    python bench/hostile_reads.py [--writes 6] [--drip-seconds 20] [--every-worker]

Children: the sandbox (the CRM), WsgiDAV behind the fault proxy (the document store, whose every
read is answered ``--drip-seconds`` late, as a store that drips its answer), and one cluster of
four workers (Q_TIMEOUT 60 s). One enquiry's eight documents are 11 KB PDFs that decode to 4 MB
of text operators each (what made a worker spend a minute).

- baseline: ``--writes`` CRM writes of other enquiries approved one at a time, each timed from
  its approval to its confirmation (the operation's ``state_changed_at``), no read anywhere;
- hostile: the eight reads are proposed, and once the store holds as many as it will, the same
  writes again while they are held.

``--every-worker`` runs the cluster with READS_MAX_IN_FLIGHT 4 and READS_PER_ENQUIRY 8: reads
may take every worker, as before reads had a share (the figure to compare with).

Printed: each phase's median and largest delay, how many reads the store had in hand at once at
most, and how the reads ended. The CRM write stands for every write and message: the e-mail
acknowledgement waits for a worker in the same way.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import common, data  # noqa: E402
from harness.processes import free_port, wait_until  # noqa: E402

WORKERS = 4
DOCUMENTS = 8
NAME = "handover_hostile_reads"


def _enquiry(reference: str):
    from django.db import transaction

    from intake.models import Category, Enquiry, Revision

    # Filed under a category: the CRM requires one before an approval (ledger.kinds).
    category, _ = Category.objects.get_or_create(slug="waste", defaults={"name": "Bins"})
    enquiry = Enquiry.objects.create(
        reference=reference,
        source="bench",
        name="A Resident",
        email="resident@example.org",
        message="My bin was not collected",
        category=category,
    )
    Revision.objects.create(
        enquiry=enquiry,
        number=1,
        category=category,
        fields={"name": "A Resident", "email": "resident@example.org", "message": "My bin"},
    )
    with transaction.atomic():
        enquiry.validate(actor="system:bench", reason="valid")
        enquiry.mark_ready_for_review(actor="system:bench", reason="ready")
        enquiry.save()
    return enquiry


def _write_delays(count: int, prefix: str, reviewer) -> list[float]:
    """Seconds from approval to confirmation of ``count`` CRM writes, one at a time."""
    from ledger.models import Operation, OperationState
    from ledger.services import approve_revision

    delays = []
    for n in range(count):
        enquiry = _enquiry(f"{prefix}-{n}")
        started = time.time()
        op = approve_revision(enquiry.pk, actor=reviewer, reason="benchmark")
        wait_until(
            lambda op=op: Operation.objects.get(pk=op.pk).state == OperationState.CONFIRMED,
            timeout=300,
            interval=0.05,
            what=f"write {prefix}-{n} confirmed",
        )
        done = Operation.objects.get(pk=op.pk).state_changed_at.timestamp()
        delays.append(done - started)
    return delays


def _summary(delays: list[float]) -> str:
    return f"median {statistics.median(delays):.2f} s, largest {max(delays):.2f} s"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=6)
    parser.add_argument("--drip-seconds", type=float, default=20.0)
    parser.add_argument("--every-worker", action="store_true")
    args = parser.parse_args(argv)
    log_dir = Path(tempfile.mkdtemp(prefix="hostile-reads-"))
    server = common.server_url()
    template = f"{NAME}_template"
    common.migrate_template(server, log_dir, template)
    db_url = common.fresh_database(server, NAME, template)
    common.setup_django(db_url)
    try:
        return _run(args, db_url, log_dir)
    finally:
        common.close_django_connections()
        common.drop_database(server, NAME)
        common.drop_database(server, template)


def _run(args, db_url: str, log_dir: Path) -> int:
    from django.db import transaction

    from harness.faultproxy import FaultProxy
    from harness.webdav import WebDavServer
    from harness.webdav.documents import text_heavy_pdf
    from intake.models import Document
    from ledger.models import Integration, Operation
    from ledger.proposals import propose_extraction

    port = free_port()
    sandbox_url = f"http://127.0.0.1:{port}"
    reviewer = data.user("reviewer", "bench-reviewer")
    data.sandbox_integrations(sandbox_url, timeout=30.0)
    share = {"READS_MAX_IN_FLIGHT": WORKERS, "READS_PER_ENQUIRY": 8} if args.every_worker else {}
    env = common.child_env(
        db_url, Q_WORKERS=WORKERS, Q_TIMEOUT=60, Q_RETRY=90, SANDBOX_URL=sandbox_url, **share
    )
    with (
        WebDavServer(log_path=log_dir / "webdav.log") as dav,
        FaultProxy(dav.url, targets={"reads": "GET /*"}, log_path=log_dir / "proxy.log") as store,
        common.sandbox_child(port, log_dir / "sandbox.sqlite3", log_dir / "sandbox.log") as box,
        common.cluster_child(env, log_dir / "qcluster.log"),
    ):
        box.wait_answers(f"{sandbox_url}/_sandbox/stats", timeout=30)
        Integration.objects.filter(name=Integration.DOCUMENTS).update(
            kind="webdav", base_url=store.url, token=dav.token, timeout_seconds=50.0
        )
        _write_delays(3, "warm", reviewer)  # the workers' imports and connections
        baseline = _write_delays(args.writes, "base", reviewer)

        store.fault("reads", "latency", count=DOCUMENTS, delay_ms=int(args.drip_seconds * 1000))
        enquiry = _enquiry("hostile")
        reads = []
        for n in range(DOCUMENTS):
            name = f"statement-{n}.pdf"
            version = dav.put(name, text_heavy_pdf(4 * 2**20))
            document = Document.objects.create(enquiry=enquiry, document_id=name, version=version)
            with transaction.atomic():
                reads.append(propose_extraction(enquiry, document, reason="bench")[0].pk)
        wait_until(lambda: store.stats()["in_flight"] > 0, timeout=60, what="reads at the store")
        hostile = _write_delays(args.writes, "hostile", reviewer)
        held_after = store.stats()["in_flight"]
        wait_until(
            lambda: (
                not Operation.objects.filter(pk__in=reads)
                .exclude(state__in=("confirmed", "failed"))
                .exists()
            ),
            timeout=600,
            interval=0.5,
            what="every read ended",
        )
        peak = store.stats()["peak_in_flight"]
        ended = sorted(Operation.objects.filter(pk__in=reads).values_list("state", flat=True))
    shares = "reads may take every worker" if args.every_worker else "reads' share as configured"
    print(f"an unrelated write, approval to confirmation, {WORKERS} workers, {shares}:")
    print(f"  baseline (no reads), {args.writes} writes:     {_summary(baseline)}")
    print(f"  while {DOCUMENTS} hostile reads run, {args.writes} writes: {_summary(hostile)}")
    print(f"  reads held at the store when the last write was confirmed: {held_after}")
    print(f"  reads in hand at the store at once, at most: {peak}")
    print(f"  the reads ended: {', '.join(ended)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
