"""What a resident's answer costs in process: the resident page's POST and the inbound
webhook's matched reply, one request after another through Django's test client in this
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
