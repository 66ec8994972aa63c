"""What a resident's answer costs: the resident page's POST and the inbound webhook's matched
reply.

In `make bench` (section ``resident``, ``measure``): over HTTP against the product's web server
(config.serve, as `make run`), the page's POSTs from several concurrent clients (each a real
answer: GET-made CSRF cookie and token, a one-time submission key, 302) with their p50/p99,
beside the same number of POSTs at the same concurrency to a bare Django view that writes one
row (bench/ceiling, the framework's floor on this machine, in the same run); then signed
inbound posts one after another, their wall time and the CPU each costs by process (web server,
PostgreSQL), beside the bare view's CPU per request.

Run by itself (``main``): one request after another through Django's test client in this
process (the whole MIDDLEWARE, no server, no sockets), against a migrated database.

Each answer is a real one: a revision of its enquiry, its journal rows, its rate counters; the
inbound post is signed, threaded by our Message-ID and taken once. Figures are per request,
wall time in this process (median, p99, mean) with the machine's other load included: a
figure for comparison on one machine, not a bound.

    python bench/resident_cost.py --database-url postgresql://postgres@127.0.0.1:5432/db \
        --answers 300

The database must be migrated (``manage.py migrate``). It writes rows there and leaves them.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KEY = "key-bench-resident-cost"
MIME = (
    "Message-ID: <{own}@mail.example.org>\r\nIn-Reply-To: {parent}\r\n"
    "From: Resident <resident@example.org>\r\nTo: council@example.org\r\n"
    "Subject: Re: your enquiry\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    "It is on Mill Lane, outside number 14.\r\n\r\nOn Fri, Handover wrote:\r\n> Hello\r\n"
)


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def summary(name, seconds):
    ms = [s * 1000 for s in seconds]
    return {
        "what": name,
        "requests": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def enquiry_waiting(state="needs_information"):
    from tests.intake.factories import EnquiryFactory

    return EnquiryFactory(state=state, email="resident@example.org")


def page_posts(client, count):
    from intake import residentlink

    times = []
    for _ in range(count):
        enquiry = enquiry_waiting()
        url = f"/r/{residentlink.token_for(enquiry)}/"
        started = time.perf_counter()
        response = client.post(url, {"text": "It is on Mill Lane, outside number 14."})
        times.append(time.perf_counter() - started)
        assert response.status_code == 302, response.status_code
    return times


def inbound_posts(client, count):
    from ledger import notices
    from ledger.models import Operation

    times = []
    for _ in range(count):
        enquiry = enquiry_waiting()
        op = Operation.objects.get(enquiry=enquiry, payload__template=notices.NEEDS_INFORMATION)
        parent = notices.message_id(op.idempotency_key)
        Operation.objects.filter(pk=op.pk).update(result={"message_id": parent})
        stamp, token = str(int(time.time())), secrets.token_hex(25)
        signature = hmac.new(KEY.encode(), f"{stamp}{token}".encode(), hashlib.sha256).hexdigest()
        post = {
            "recipient": "council@example.org",
            "body-mime": MIME.format(own=secrets.token_hex(8), parent=parent),
            "timestamp": stamp,
            "token": token,
            "signature": signature,
        }
        started = time.perf_counter()
        response = client.post("/inbound/mailgun/", post)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    return times


# --- the `make bench` section: over HTTP, against the real web server ----------------------


def _signed_inbound(parent: str) -> dict:
    stamp, token = str(int(time.time())), secrets.token_hex(25)
    signature = hmac.new(KEY.encode(), f"{stamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {
        "recipient": "council@example.org",
        "body-mime": MIME.format(own=secrets.token_hex(8), parent=parent),
        "timestamp": stamp,
        "token": token,
        "signature": signature,
    }


def _asked_with_message(count):
    """``count`` enquiries in needs_information whose message's Message-ID is kept (as the
    relay's answer records it)."""
    from ledger import notices
    from ledger.models import Operation

    made = []
    for _ in range(count):
        enquiry = enquiry_waiting()
        op = Operation.objects.get(enquiry=enquiry, payload__template=notices.NEEDS_INFORMATION)
        parent = notices.message_id(op.idempotency_key)
        Operation.objects.filter(pk=op.pk).update(result={"message_id": parent})
        made.append((enquiry, parent))
    return made


def _csrf(session, base, token):
    import re

    page = session.get(f"{base}/r/{token}/", timeout=30)
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)


def _page_load(base, tokens, clients):
    """Every token's page answered once, ``clients`` threads at a time; (latencies, statuses)."""
    import threading

    import requests

    work = list(tokens)
    lock = threading.Lock()
    latencies, statuses = [], {}

    def client():
        session = requests.Session()
        session.trust_env = False
        csrf = _csrf(session, base, tokens[0])
        headers = {"Origin": base, "Referer": f"{base}/"}
        while True:
            with lock:
                if not work:
                    return
                token = work.pop()
            form = {
                "csrfmiddlewaretoken": csrf,
                "submission": secrets.token_hex(16),
                "text": "It is on Mill Lane, outside number 14.",
            }
            started = time.perf_counter()
            response = session.post(
                f"{base}/r/{token}/", data=form, headers=headers, allow_redirects=False, timeout=60
            )
            took = time.perf_counter() - started
            with lock:
                latencies.append(took)
                statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, statuses


def measure(db_url: str, args, log_dir) -> dict:
    import requests

    from bench.common import CpuMeter, child, child_env, postmaster_pid
    from bench.intake import WEB_SERVERS, make_events, send_all
    from harness.processes import free_port
    from intake import residentlink
    from intake.models import Revision
    from ledger.integrations import ensure_integrations

    count, clients = args.resident_answers, args.resident_clients
    port, ceiling_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    env = child_env(
        db_url,
        MAILGUN_WEBHOOK_SIGNING_KEY=KEY,
        RESIDENT_ANSWERS_PER_HOUR=str(count * 10),
        CONSOLE_URL=base,
    )
    web_command = WEB_SERVERS[getattr(args, "web_server", "serve")]
    cmd = web_command(port, args.web_workers, args.web_threads)
    ceiling_cmd = web_command(
        ceiling_port, args.web_workers, args.web_threads, app="bench.ceiling.wsgi:application"
    )
    from bench import baselines

    baselines.raw_table(db_url)
    ensure_integrations()
    postgres = {"postgres": pid} if (pid := postmaster_pid(db_url)) else {}
    page_runs, inbound_runs = [], []
    with (
        child("web", cmd, env, log_dir / "resident-web.log") as web,
        child("ceiling", ceiling_cmd, env, log_dir / "resident-ceiling.log") as ceiling,
    ):
        web.wait_answers(f"{base}/healthz", timeout=60)
        ceiling.wait_answers(f"http://127.0.0.1:{ceiling_port}/intake/events/bench/", timeout=60)
        # Warm every worker (imports, connections) before timing anything.
        warm = [residentlink.token_for(e) for e, _p in _asked_with_message(clients * 2)]
        _page_load(base, warm, clients)
        send_all(ceiling_port, make_events(clients * 4, 0.0, seed=0), clients)
        session = requests.Session()
        session.trust_env = False
        for run in range(args.runs):
            asked = _asked_with_message(count)
            tokens = [residentlink.token_for(e) for e, _p in asked]
            before = Revision.objects.filter(origin="resident").count()
            with CpuMeter({"web": web.pid} | postgres) as cpu:
                latencies, statuses = _page_load(base, tokens, clients)
            revisions = Revision.objects.filter(origin="resident").count() - before
            with CpuMeter({"web": ceiling.pid} | postgres) as bare_cpu:
                bare = send_all(ceiling_port, make_events(count, 0.0, seed=run + 1), clients)
            page_runs.append(
                {
                    **summary("resident page POST", latencies),
                    "statuses": statuses,
                    "revisions": revisions,
                    "cpu_ms_per_request": cpu.ms_per(count),
                    "baseline_p99_ms": bare["p99_ms"],
                    "baseline_p50_ms": bare["p50_ms"],
                    "baseline_cpu_ms_per_request": bare_cpu.ms_per(count),
                }
            )
            asked = _asked_with_message(count)
            before = Revision.objects.filter(origin="resident").count()
            times, codes = [], {}
            with CpuMeter({"web": web.pid} | postgres) as cpu:
                for _enquiry, parent in asked:
                    post = _signed_inbound(parent)
                    started = time.perf_counter()
                    response = session.post(f"{base}/inbound/mailgun/", data=post, timeout=60)
                    times.append(time.perf_counter() - started)
                    codes[str(response.status_code)] = codes.get(str(response.status_code), 0) + 1
            inbound_runs.append(
                {
                    **summary("inbound reply", times),
                    "statuses": codes,
                    "revisions": Revision.objects.filter(origin="resident").count() - before,
                    "cpu_ms_per_message": cpu.ms_per(count),
                }
            )
    return _figures(page_runs, inbound_runs, count, clients)


def _figures(page_runs, inbound_runs, count, clients) -> dict:
    from bench.common import median, median_cpu

    def med(runs, key):
        return round(median([r[key] for r in runs]), 2)

    return {
        "answers_per_run": count,
        "clients": clients,
        "page_p50_ms": med(page_runs, "median_ms"),
        "page_p99_ms": med(page_runs, "p99_ms"),
        "page_p99_ms_by_run": [r["p99_ms"] for r in page_runs],
        "page_cpu_ms_per_request": median_cpu(page_runs, "cpu_ms_per_request"),
        "baseline_p50_ms": med(page_runs, "baseline_p50_ms"),
        "baseline_p99_ms": med(page_runs, "baseline_p99_ms"),
        "baseline_cpu_ms_per_request": median_cpu(page_runs, "baseline_cpu_ms_per_request"),
        "page_not_302": sum(
            n for r in page_runs for code, n in r["statuses"].items() if code != "302"
        ),
        "page_revisions_missing": sum(count - r["revisions"] for r in page_runs),
        "inbound_p50_ms": med(inbound_runs, "median_ms"),
        "inbound_mean_ms": med(inbound_runs, "mean_ms"),
        "inbound_cpu_ms_per_message": median_cpu(inbound_runs, "cpu_ms_per_message"),
        "inbound_not_200": sum(
            n for r in inbound_runs for code, n in r["statuses"].items() if code != "200"
        ),
        "inbound_revisions_missing": sum(count - r["revisions"] for r in inbound_runs),
        "runs": {"page": page_runs, "inbound": inbound_runs},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--answers", type=int, default=200)
    options = parser.parse_args(argv)
    os.environ["DATABASE_URL"] = options.database_url
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
    os.environ.setdefault("HANDOVER_TESTING", "1")
    os.environ["MAILGUN_WEBHOOK_SIGNING_KEY"] = KEY
    os.environ["RESIDENT_ANSWERS_PER_HOUR"] = str(options.answers * 10)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.test import Client

    from ledger.integrations import ensure_integrations

    ensure_integrations()
    client = Client(HTTP_HOST="127.0.0.1")
    figures = [
        summary("resident page POST (answer -> revision)", page_posts(client, options.answers)),
        summary("inbound reply, matched by Message-ID", inbound_posts(client, options.answers)),
    ]
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
