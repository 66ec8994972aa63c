"""The resident's acknowledgement by e-mail: a signed event posted to intake until the SMTP relay's
``250`` for the acknowledgement it causes, at half the capacity measured in the same run.

The web server (``python -m config.serve``), one django-q2 cluster, the sandbox (the receipt's
category suggestion) and the harness's SMTP relay (``harness/mailserver``; the notification
integration of kind ``smtp``, as ``make run`` and the e-mail tests use it) run as child
processes. Each event carries its own address, so each acknowledgement is matched to its event by
recipient; the relay stamps each message as it keeps it, just before its ``250``.

- capacity: a burst of events posted as fast as the senders go; acknowledgements per second from
  the first post to the last ``250``;
- latency: events posted open loop at half that capacity (event n due at n / rate, from a few
  threads, so a slow post never pushes the schedule back), ``--latency-seconds`` long but at
  least ``MIN_SAMPLES`` events; from each post to its ``250``: p50, p99, beside the rate
  offered and the rate achieved.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid

from bench.common import (
    BENCH_SECRET,
    BENCH_SOURCE,
    child,
    child_env,
    cluster_child,
    percentile,
    sandbox_child,
)
from bench.intake import serve_command
from harness.processes import free_port, wait_until

TARGET_P99_MS = 2000.0
POSTERS = 4
# A p99 of fewer samples is the maximum: at least this many events in the steady load (more
# than ``--latency-seconds`` when the capacity is low; a busy machine's 1.4/s gives 28 in 20 s).
MIN_SAMPLES = 100


def _events(count: int, tag: str) -> list[tuple[str, bytes, dict]]:
    """(recipient, body, headers): signed events, each with an address of its own."""
    from intake.signing import sign

    now = int(time.time())
    events = []
    for n in range(count):
        address = f"ack-{tag}-{n}@example.org".lower()  # intake keeps addresses lower-case
        body = json.dumps(
            {
                "name": f"Resident {tag}{n}",
                "email": address,
                "subject": "Bench acknowledgement",
                "message": "My bin was not collected on Tuesday.",
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
        events.append((address, body, headers))
    return events


def _post_all(port: int, events, *, rate: float | None) -> tuple[dict, list[float], list]:
    """Post ``events`` from POSTERS threads, each on its own keep-alive connection: as fast as
    they go (rate None), or event n at n / rate after the start. Returns ({recipient: wall-clock
    time its post started}, [seconds each started after its slot], [unexpected statuses])."""
    path = f"/intake/events/{BENCH_SOURCE}/"
    lock = threading.Lock()
    slots = iter(range(len(events)))
    posted, lags, problems = {}, [], []
    started = time.perf_counter() + 0.1

    def poster():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            while True:
                with lock:
                    n = next(slots, None)
                if n is None:
                    return
                address, body, headers = events[n]
                due = started + n / rate if rate else time.perf_counter()
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                lag = time.perf_counter() - due
                at = time.time()
                try:
                    conn.request("POST", path, body=body, headers=headers)
                    response = conn.getresponse()
                    response.read()
                    status = response.status
                except (http.client.HTTPException, OSError) as exc:
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    status = repr(exc)
                with lock:
                    posted[address] = at
                    lags.append(lag)
                    if status != 202:
                        problems.append(status)
        finally:
            conn.close()

    threads = [threading.Thread(target=poster) for _ in range(POSTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return posted, lags, problems


def _received(mail) -> dict[str, list[float]]:
    """{recipient: [times the relay kept a message for it]}."""
    out: dict[str, list[float]] = {}
    for record in mail.messages():
        for address in record["to"]:
            out.setdefault(address, []).append(record["received_at"])
    return out


def _wait_for(mail, addresses, timeout: float, what: str) -> dict[str, list[float]]:
    wanted = set(addresses)

    def done():
        return wanted <= set(_received(mail))

    wait_until(done, timeout=timeout, interval=0.2, what=what)
    return _received(mail)


def _smtp_notify(mail) -> None:
    from ledger.kinds import SMTP
    from ledger.models import Integration

    Integration.objects.filter(name=Integration.NOTIFY).update(
        kind=SMTP,
        base_url=mail.url,
        token="",
        supports_lookup=False,
        supports_idempotency_key=False,
    )
    Integration.objects.get(name=Integration.NOTIFY).full_clean()


def measure(db_url: str, args, log_dir) -> dict:
    from bench import data
    from harness.mailserver import MailServer

    sandbox_port = free_port()
    sandbox_url = f"http://127.0.0.1:{sandbox_port}"
    sandbox_file = log_dir / "sandbox-acknowledgement.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        sandbox_file.with_name(sandbox_file.name + suffix).unlink(missing_ok=True)
    data.sandbox_integrations(sandbox_url)
    env = child_env(db_url, Q_WORKERS=args.q_workers, SANDBOX_URL=sandbox_url)
    if args.q_poll:
        env["Q_POLL"] = str(args.q_poll)
    port = free_port()
    web_cmd = serve_command(port, args.web_workers, args.web_threads)
    timeout = 300.0
    mail_dir = log_dir / "mail-acknowledgement"
    with (
        MailServer(mail_dir / "messages", log_path=log_dir / "mailserver.log") as mail,
        sandbox_child(sandbox_port, sandbox_file, log_dir / "sandbox-acknowledgement.log") as box,
        child("web", web_cmd, env, log_dir / "web-acknowledgement.log") as web,
    ):
        mail.reset()
        _smtp_notify(mail)
        box.wait_answers(f"{sandbox_url}/_sandbox/stats", timeout=30)
        web.wait_answers(f"http://127.0.0.1:{port}/healthz", timeout=60)
        with cluster_child(env, log_dir / "qcluster-acknowledgement.log"):
            warm = _events(8, "W")
            _post_all(port, warm, rate=None)
            _wait_for(mail, [a for a, _, _ in warm], timeout, "warm-up acknowledgements")
            # Capacity: a burst, as fast as the posters go, to the last 250.
            burst = _events(args.acknowledgements, "C")
            posted, _, burst_problems = _post_all(port, burst, rate=None)
            received = _wait_for(mail, posted, timeout, "the burst's acknowledgements")
            first = min(posted.values())
            last = max(max(received[a]) for a in posted)
            capacity = len(burst) / (last - first)
            # Latency at half of it, open loop.
            offered = capacity / 2
            floor = 20 if getattr(args, "quick", False) else MIN_SAMPLES
            count = max(floor, round(offered * args.latency_seconds))
            steady = _events(count, "L")
            posted, lags, problems = _post_all(port, steady, rate=offered)
            received = _wait_for(mail, posted, timeout, "the steady load's acknowledgements")
    latencies = [(min(received[a]) - at) * 1000 for a, at in posted.items()]
    sent = sorted(posted.values())
    achieved = (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 else 0.0
    duplicates = sum(len(received[a]) - 1 for a in [*posted, *(a for a, _, _ in burst)])
    return {
        "capacity_per_s": round(capacity, 1),
        "burst": len(burst),
        "offered_per_s": round(offered, 1),
        "achieved_per_s": round(achieved, 1),
        "count": count,
        "posts_behind_schedule": sum(1 for lag in lags if lag > 0.05),
        "p50_ms": round(percentile(latencies, 50), 1),
        "p99_ms": round(percentile(latencies, 99), 1),
        "max_ms": round(max(latencies), 1),
        "target_p99_ms": TARGET_P99_MS,
        "duplicates": duplicates,
        "not_202": len(problems) + len(burst_problems),
        "q_workers": args.q_workers,
    }
