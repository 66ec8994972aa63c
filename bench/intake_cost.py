"""What one intake event costs in process, by variant, the variants alternated batch by batch.

Each request goes through a Django WSGI handler in this process, as a web server would hand it
over (a signed event, a new webhook-id each), so no server, no sockets and no other process
count; only this process's CPU and its PostgreSQL backend's (``psutil``) are charged to the
variant whose batch ran. Alternating small batches in one process makes the comparison hold
on a machine whose load moves by minutes. Variants:

- ``intake``: the endpoint as served (config/webhooks.py: the short middleware chain);
- ``intake_full_chain``: the same through the whole MIDDLEWARE;
- ``intake_one_by_one``: the short chain, each of the event's writes sent on its own (the same
  written-out statements, ``config.roundtrip.together()`` made a no-op), for what sending them
  together saves;
- ``intake_no_health_check``: the short chain without the connection's health check
  (CONN_HEALTH_CHECKS' ``SELECT 1``), for what that round trip costs;
- ``ceiling``: bench/ceiling's view (one INSERT, one transaction) through the short chain;
- ``ceiling_full_chain``: the same through the whole MIDDLEWARE;
- ``ceiling_4_more_round_trips``: the ceiling with four ``SELECT 1`` in its transaction,
  for what a round trip costs on each side.

    python bench/intake_cost.py --database-url postgresql://postgres@127.0.0.1:5432/db \
        --batches 30 --size 10

The database must be migrated (``manage.py migrate``); ``bench_raw`` is made if missing. It
writes rows there and leaves them.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VARIANTS = (
    "intake",
    "intake_full_chain",
    "intake_one_by_one",
    "intake_no_health_check",
    "ceiling",
    "ceiling_full_chain",
    "ceiling_4_more_round_trips",
)


def _four_more(request, source):
    from django.db import connection, transaction
    from django.http import JsonResponse

    with transaction.atomic(), connection.cursor() as cursor:
        for _ in range(4):
            cursor.execute("SELECT 1")
        cursor.execute(
            "INSERT INTO bench_raw (source, event_id, body) VALUES (%s, %s, %s) "
            "ON CONFLICT (source, event_id) DO NOTHING",
            [source, request.headers.get("webhook-id", ""), request.body.decode()],
        )
    return JsonResponse({"status": "received"}, status=202)


class FourMoreUrls:
    """A URLconf: the ceiling's path, answered by _four_more."""

    @property
    def urlpatterns(self):
        from django.urls import path
        from django.views.decorators.csrf import csrf_exempt

        return [path("intake/events/<slug:source>/", csrf_exempt(_four_more))]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--database-url", required=True)
    p.add_argument("--batches", type=int, default=30)
    p.add_argument("--size", type=int, default=10, help="requests per batch")
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args(argv)

    from bench import baselines
    from bench.common import BENCH_SECRET, BENCH_SOURCE, child_env

    os.environ.update(child_env(args.database_url, HANDOVER_WEB="1", CONN_MAX_AGE="600"))
    import django

    django.setup()
    import psutil
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connection

    from bench.intake import MESSAGES
    from config.webhooks import WebhookHandler
    from intake.signing import sign

    baselines.raw_table(args.database_url)
    short, whole = WebhookHandler(), WSGIHandler()
    urlconf = settings.ROOT_URLCONF

    def routed(name):
        def setup(on):
            settings.ROOT_URLCONF = name if on else urlconf

        return setup

    def no_health_check(on):
        connection.settings_dict["CONN_HEALTH_CHECKS"] = not on

    import contextlib

    from config import roundtrip

    together = roundtrip.together

    def one_by_one(on):
        roundtrip.together = contextlib.nullcontext if on else together

    four_more = FourMoreUrls()
    table = {
        "intake": (short, None),
        "intake_full_chain": (whole, None),
        "intake_one_by_one": (short, one_by_one),
        "intake_no_health_check": (short, no_health_check),
        "ceiling": (short, routed("bench.ceiling.urls")),
        "ceiling_full_chain": (whole, routed("bench.ceiling.urls")),
        "ceiling_4_more_round_trips": (short, routed(four_more)),
    }
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    counter = [0]
    statuses: dict[str, int] = {}

    def make(now):
        i = counter[0]
        counter[0] += 1
        body = json.dumps(
            {
                "name": f"Resident {i}",
                "email": f"resident{i % 997}@example.org",
                "subject": "Bench enquiry",
                "message": MESSAGES[i % len(MESSAGES)],
                "consent": True,
            }
        ).encode()
        msg_id = f"msg_{uuid.uuid4().hex}"
        return {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": f"/intake/events/{BENCH_SOURCE}/",
            "SCRIPT_NAME": "",
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_WEBHOOK_ID": msg_id,
            "HTTP_WEBHOOK_TIMESTAMP": str(now),
            "HTTP_WEBHOOK_SIGNATURE": sign(BENCH_SECRET, msg_id, now, body),
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }

    def start_response(status, headers, exc_info=None):
        statuses[status[:3]] = statuses.get(status[:3], 0) + 1

    def batch(name, count, now):
        app, setup = table[name]
        environs = [make(now) for _ in range(count)]
        if setup:
            setup(True)
        try:
            for environ in environs:
                result = app(environ, start_response)
                b"".join(result)
                result.close()
        finally:
            if setup:
                setup(False)

    now = int(time.time())
    for name in names:  # warm each path (imports, the connection, caches)
        batch(name, 10, now)
    backend = psutil.Process(connection.connection.info.backend_pid)
    spent = {n: [0.0, 0.0, 0] for n in names}
    started = time.time()
    for b in range(args.batches):
        for name in names if b % 2 == 0 else names[::-1]:
            cpu, pg = time.process_time(), sum(backend.cpu_times()[:2])
            batch(name, args.size, now)
            spent[name][0] += time.process_time() - cpu
            spent[name][1] += sum(backend.cpu_times()[:2]) - pg
            spent[name][2] += args.size
    result = {
        "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "seconds": round(time.time() - started),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "requests_per_variant": args.batches * args.size,
        "statuses": statuses,
        "cpu_ms_per_request": {
            n: {"web": round(w / c * 1000, 3), "postgres": round(p / c * 1000, 3)}
            for n, (w, p, c) in spent.items()
        },
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
