"""How long /healthz takes while 1,100 connections each hold one byte of a request.

The server as `make run` starts it (``python -m config.serve``: 2 processes x 4 threads, 500
connections each, the default limits), then: /healthz asked ``--samples`` times alone; then
``--connections`` connections from ``--addresses`` loopback addresses (127.0.3.x), each
having sent one byte, and /healthz asked again while they are held; then how long until the
server has cut every one of them (their header time, ``WEB_HEADER_TIMEOUT``). The attack of
issue 41, item 3; tests/security/test_slow_clients.py proves the same without timing it.

    python bench/slow_clients.py --database-url postgresql://postgres@127.0.0.1:5432/db

The database must be migrated (``manage.py migrate``): /healthz reads it and the queue.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.processes import free_port, web_command  # noqa: E402

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthz_seconds(url: str) -> float:
    started = time.monotonic()
    with OPENER.open(url + "/healthz", timeout=120) as answer:
        assert answer.status == 200, answer.status
        answer.read()
    return time.monotonic() - started


def closed(sock) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    if not poller.poll(0):
        return False
    try:
        return sock.recv(1) == b""
    except OSError:
        return True


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--database-url", required=True)
    p.add_argument("--connections", type=int, default=1100)
    p.add_argument("--addresses", type=int, default=110)
    p.add_argument("--samples", type=int, default=5)
    args = p.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DATABASE_URL": args.database_url, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(
        web_command(f"127.0.0.1:{port}"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    held = []
    try:
        for _ in range(600):
            try:
                healthz_seconds(url)
                break
            except OSError:
                time.sleep(0.2)
        alone = [healthz_seconds(url) for _ in range(args.samples)]
        for n in range(args.connections):
            sock = socket.socket()
            sock.bind((f"127.0.3.{n % args.addresses + 1}", 0))
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"G")
            held.append(sock)
        opened = time.monotonic()
        during = [healthz_seconds(url) for _ in range(args.samples)]
        while not all(closed(sock) for sock in held) and time.monotonic() - opened < 120:
            time.sleep(0.1)
        cut_after = time.monotonic() - opened
        cut = sum(closed(sock) for sock in held)
        print(f"/healthz alone: median {statistics.median(alone) * 1000:.0f} ms")
        print(
            f"/healthz while {args.connections} one-byte connections from {args.addresses} "
            f"addresses are held: median {statistics.median(during) * 1000:.0f} ms, "
            f"max {max(during) * 1000:.0f} ms"
        )
        print(f"cut by the server: {cut} of {len(held)}, all within {cut_after:.1f} s")
    finally:
        for sock in held:
            sock.close()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)


if __name__ == "__main__":
    main()
