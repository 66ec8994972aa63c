"""Intake: signed events accepted per second over HTTP, beside raw PostgreSQL inserts.

gunicorn serves the real endpoint (``POST /intake/events/<source>/``) as a child process; eight
sender threads post pre-signed events over keep-alive connections, a share of them delivered
twice (a repeat answers 200 with the stored result). Every request counts, duplicates
included. The baseline writes the same number of rows, one plain transaction each, with the
same eight concurrent clients (psycopg, no Django): what PostgreSQL commits cost on this machine.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

from bench import baselines
from bench.common import (
    BENCH_SECRET,
    BENCH_SOURCE,
    CpuMeter,
    child,
    child_env,
    median,
    median_cpu,
    percentile,
    postmaster_pid,
    ratio,
)
from harness.processes import free_port

MESSAGES = [
    "My bin was not collected on Tuesday and the street is full of rubbish.",
    "There is a pothole outside number 12 that has damaged two cars this week.",
    "I would like to book an appointment to discuss my council tax bill.",
    "The streetlight at the corner of Mill Lane has been out for a fortnight.",
]


def make_events(count: int, duplicate_rate: float, seed: int) -> list[tuple[str, bytes, dict]]:
    """``count`` requests: unique signed events plus repeats of some of them, shuffled so a
    repeat may arrive while its original is still being stored (as a retrying sender does)."""
    from intake.signing import sign

    rng = random.Random(seed)
    unique = max(1, round(count / (1 + duplicate_rate)))
    now = int(time.time())
    events = []
    for i in range(unique):
        body = json.dumps(
            {
                "name": f"Resident {i}",
                "email": f"resident{i % 997}@example.org",
                "subject": "Bench enquiry",
                "message": rng.choice(MESSAGES),
                "consent": True,
            }
        ).encode()
        msg_id = f"msg_{uuid.uuid4().hex}"
        headers = {
            "Content-Type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(now),
            "webhook-signature": sign(BENCH_SECRET, msg_id, now, body),
        }
        events.append((msg_id, body, headers))
    repeats = [events[rng.randrange(unique)] for _ in range(count - unique)]
    requests = events + repeats
    rng.shuffle(requests)
    return requests


class Sender(threading.Thread):
    """One sender: a keep-alive HTTP/1.1 connection, reopened when the server closes it."""

    def __init__(self, host, port, path, work, latencies, statuses, errors, barrier=None):
        super().__init__(daemon=True)
        self.host, self.port, self.path = host, port, path
        self.work, self.latencies, self.statuses, self.errors = work, latencies, statuses, errors
        self.conn = None
        # With a barrier: connect, wait twice (connected; the split read), then send.
        self.barrier = barrier

    def _post(self, body, headers):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        self.conn.request("POST", self.path, body=body, headers=headers)
        response = self.conn.getresponse()
        response.read()
        if response.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = None
        return response.status

    def run(self):
        if self.barrier is not None:
            try:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                self.conn.connect()
            except OSError as exc:  # reported in the results; the first post connects again
                self.errors.append(repr(exc))
                self.conn = None
            finally:
                self.barrier.wait(timeout=30)
                self.barrier.wait(timeout=30)
        for _msg_id, body, headers in self.work:
            started = time.perf_counter()
            try:
                try:
                    status = self._post(body, headers)
                except (http.client.RemoteDisconnected, ConnectionError, BrokenPipeError):
                    # The server closed an idle keep-alive connection before reading the
                    # request; sending again is safe (the webhook-id makes it idempotent).
                    if self.conn is not None:
                        self.conn.close()
                    self.conn = None
                    status = self._post(body, headers)
            except Exception as exc:  # reported in the results, never swallowed
                self.errors.append(repr(exc))
                continue
            self.latencies.append((time.perf_counter() - started) * 1000)
            self.statuses.append(status)
        if self.conn is not None:
            self.conn.close()


def connections_per_worker(server_pid: int, port: int) -> list[int] | None:
    """How many established connections to ``port`` each of the web server's processes holds, most
    first. A gthread worker keeps a keep-alive connection for its life, so the senders' split
    between the workers holds for the whole run."""
    import psutil

    try:
        workers = psutil.Process(server_pid).children()
        counts = [
            sum(
                1
                for c in worker.net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
            )
            for worker in workers
        ]
    except (psutil.Error, OSError):
        return None
    return sorted(counts, reverse=True)


def send_all(port: int, requests, senders: int, server_pid: int | None = None) -> dict:
    """Post ``requests`` from ``senders`` threads; with ``server_pid`` (gunicorn's master), also
    report how the senders' connections sit on its workers once they have all connected."""
    path = f"/intake/events/{BENCH_SOURCE}/"
    shares = [requests[i::senders] for i in range(senders)]
    latencies, statuses, errors = [], [], []
    # With the server's pid the split is read once every sender has connected and before any
    # sends: read while they sent, a short run could end before its first reading (seen: [0, 0]).
    barrier = threading.Barrier(senders + 1) if server_pid is not None else None
    threads = [
        Sender("127.0.0.1", port, path, share, latencies, statuses, errors, barrier)
        for share in shares
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    split = None
    if barrier is not None:
        barrier.wait(timeout=30)  # every sender has connected
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            split = connections_per_worker(server_pid, port)
            if split is None or sum(split) >= senders:
                break
            time.sleep(0.02)  # the server may not have accepted every connection yet
        barrier.wait(timeout=30)  # send
    for t in threads:
        t.join(timeout=600)
    elapsed = time.perf_counter() - started
    accepted = sum(1 for s in statuses if s in (200, 202))
    by_status: dict[str, int] = {}
    for s in statuses:
        by_status[str(s)] = by_status.get(str(s), 0) + 1
    return {
        "requests": len(requests),
        "accepted": accepted,
        "seconds": round(elapsed, 3),
        "events_per_s": round(accepted / elapsed, 1),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "statuses": by_status,
        "errors": errors[:5],
        "error_count": len(errors),
        "connections_per_worker": split,
    }


def gunicorn_command(
    port: int, workers: int, threads: int, app: str = "config.wsgi:application"
) -> list[str]:
    import sys

    return [
        sys.executable,
        "-m",
        "gunicorn",
        app,
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--worker-class",
        "gthread",
        "--keep-alive",
        "30",
        "--backlog",
        "512",
    ]


def serve_command(
    port: int, workers: int, threads: int, app: str = "config.wsgi:application"
) -> list[str]:
    """The product's server (``python -m config.serve``, waitress), as `make run` starts it."""
    import sys

    command = [
        sys.executable,
        "-m",
        "config.serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--processes",
        str(workers),
        "--threads",
        str(threads),
    ]
    if app != "config.wsgi:application":
        command += ["--app", app]
    return command


WEB_SERVERS = {"serve": serve_command, "gunicorn": gunicorn_command}


def measure(db_url: str, args, log_dir) -> dict:
    from intake.models import Enquiry, IntakeEvent

    port, ceiling_port = free_port(), free_port()
    env = child_env(db_url)
    runs = []
    web_command = WEB_SERVERS[getattr(args, "web_server", "serve")]
    cmd = web_command(port, args.web_workers, args.web_threads)
    # bench/profile.py asks for the ceiling to connect as another role, so that PostgreSQL's
    # statement statistics (kept per role) tell its statements from intake's.
    ceiling_role = os.environ.get("BENCH_CEILING_ROLE")
    ceiling_env = env
    if ceiling_role:
        parts = urlsplit(db_url)
        netloc = f"{ceiling_role}@{parts.hostname}:{parts.port}"
        ceiling_env = child_env(urlunsplit(parts._replace(netloc=netloc)))
    ceiling_cmd = web_command(
        ceiling_port, args.web_workers, args.web_threads, app="bench.ceiling.wsgi:application"
    )
    baselines.raw_table(db_url)
    server = postmaster_pid(db_url)
    with (
        child("web", cmd, env, log_dir / "gunicorn.log") as web,
        child("ceiling", ceiling_cmd, ceiling_env, log_dir / "gunicorn-ceiling.log") as ceiling_web,
    ):
        # CPU by process during each measured run (bench.common.CpuMeter): the web server,
        # PostgreSQL (when it runs here) and this process (the senders).
        postgres = {"postgres": server} if server is not None else {}
        roots, ceiling_roots = {"web": web.pid} | postgres, {"web": ceiling_web.pid} | postgres
        web.wait_answers(f"http://127.0.0.1:{port}/healthz", timeout=60)
        ceiling_web.wait_answers(
            f"http://127.0.0.1:{ceiling_port}/intake/events/{BENCH_SOURCE}/", timeout=60
        )
        # Warm every worker's connection and imports before timing anything.
        warm = make_events(args.senders * args.web_workers * 4, 0.0, seed=0)
        send_all(port, warm, args.senders)
        send_all(ceiling_port, warm, args.senders)
        for run in range(args.runs):
            events_before = IntakeEvent.objects.count()
            requests = make_events(args.events, args.duplicate_rate, seed=run + 1)
            unique = len({r[0] for r in requests})
            with CpuMeter(roots) as cpu:
                measured = send_all(port, requests, args.senders, server_pid=web.pid)
            stored = IntakeEvent.objects.count() - events_before
            baseline = baselines.raw_postgres_inserts(
                db_url, rows=len(requests), clients=args.senders
            )
            # The same requests to a view that writes one row: the framework's ceiling.
            with CpuMeter(ceiling_roots) as ceiling_cpu:
                ceiling = send_all(ceiling_port, requests, args.senders)
            runs.append(
                {
                    **measured,
                    "cpu_ms_per_request": cpu.ms_per(len(requests)),
                    "ceiling_cpu_ms_per_request": ceiling_cpu.ms_per(len(requests)),
                    "unique_events": unique,
                    "stored_events": stored,
                    "baseline_per_s": round(baseline["per_s"], 1),
                    "ratio": ratio(measured["events_per_s"], baseline["per_s"]),
                    "ceiling_per_s": ceiling["events_per_s"],
                    "ceiling_p99_ms": ceiling["p99_ms"],
                    "ceiling_errors": ceiling["error_count"]
                    + sum(n for code, n in ceiling["statuses"].items() if code != "202"),
                }
            )
    enquiries = Enquiry.objects.count()
    events = IntakeEvent.objects.count()
    per_s = median([r["events_per_s"] for r in runs])
    base = median([r["baseline_per_s"] for r in runs])
    ceiling = median([r["ceiling_per_s"] for r in runs])
    return {
        "events_per_s": round(per_s, 1),
        "baseline_per_s": round(base, 1),
        "ratio": ratio(per_s, base),
        "p50_ms": round(median([r["p50_ms"] for r in runs]), 2),
        "p99_ms": round(median([r["p99_ms"] for r in runs]), 2),
        "p99_ms_by_run": [r["p99_ms"] for r in runs],
        # The senders' keep-alive connections on each gunicorn worker, by run: an uneven split
        # (5/3, 6/2) puts more senders behind one worker's GIL, and its runs' p99 is higher.
        "connections_per_worker": [r["connections_per_worker"] for r in runs],
        "cpu_ms_per_request": median_cpu(runs, "cpu_ms_per_request"),
        # gunicorn + Django answering the same requests with one INSERT each (bench/ceiling):
        # the most any Django intake could do here; its ratio to raw PostgreSQL bounds ours.
        "framework_ceiling": {
            "per_s": round(ceiling, 1),
            "cpu_ms_per_request": median_cpu(runs, "ceiling_cpu_ms_per_request"),
            "ratio_to_baseline": ratio(ceiling, base),
            "p99_ms": round(median([r["ceiling_p99_ms"] for r in runs]), 2),
            "errors": sum(r["ceiling_errors"] for r in runs),
            "intake_share": ratio(per_s, ceiling),
        },
        "requests_per_run": runs[0]["requests"] if runs else 0,
        "duplicate_rate": args.duplicate_rate,
        "senders": args.senders,
        "web_server": {
            "server": getattr(args, "web_server", "serve"),
            "processes": args.web_workers,
            "threads": args.web_threads,
        },
        "one_enquiry_per_event": enquiries == events,
        "runs": runs,
    }
