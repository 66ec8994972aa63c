"""The fault proxy's HTTP server: listen on loopback, serve until told to stop.

    python -m harness.faultproxy --upstream URL [--host 127.0.0.1] [--port 8766]
        [--target NAME='METHOD /path' ...] [--upstream-timeout 60]

Standard library only (``http.server`` threads, ``http.client`` upstream connections).

The handler is relay.py (forwarding and the faults) with control.py (``/_proxy/``); the upstream
connection is upstream.py.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from http.server import ThreadingHTTPServer
from typing import Any

from harness.faultproxy.faults import Pattern, ProxyState
from harness.faultproxy.relay import ProxyHandler
from harness.faultproxy.upstream import Upstream

logger = logging.getLogger("harness.faultproxy")
DEFAULT_UPSTREAM_TIMEOUT_SECONDS = 60.0


def loopback_host(host: str) -> str:
    """The address to bind for ``host``; ValueError unless it is a loopback address.

    The proxy forwards anything it is sent, credentials included, to a real system: reachable
    from another machine it would be an open relay into that system.
    """
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is None or not address.is_loopback:
        raise ValueError(
            f"refusing to bind the fault proxy to {host!r}: it binds only to a loopback "
            "address (127.0.0.1, ::1 or localhost)"
        )
    return host


class FaultProxyServer(ThreadingHTTPServer):
    daemon_threads = True  # held requests must not keep a stopping proxy alive

    def __init__(
        self,
        upstream: str,
        host: str = "127.0.0.1",
        port: int = 0,
        targets: dict[str, str] | None = None,
        upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT_SECONDS,
        parent_pid: int | None = None,
    ) -> None:
        host = loopback_host(host)
        self.parent_pid = parent_pid
        self.upstream = Upstream.parse(upstream)
        self.state = ProxyState(targets)
        self.upstream_timeout = upstream_timeout
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, port), ProxyHandler)

    def service_actions(self) -> None:
        # A test or drill that dies without stopping its proxy must not leave it listening:
        # once the parent is gone we are re-parented, and stop.
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            logger.info("parent %s is gone: stopping", self.parent_pid)
            raise SystemExit(0)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(upstream: str, host: str = "127.0.0.1", port: int = 0, **options: Any) -> None:
    """Serve until SIGTERM, Ctrl-C or (with ``parent_pid``) that parent's exit; the first line
    on stdout names the bound URL. ``options``: FaultProxyServer's ``targets``,
    ``upstream_timeout`` and ``parent_pid``."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        server = FaultProxyServer(upstream, host, port, **options)
    except OSError as exc:
        raise SystemExit(f"fault proxy: cannot listen on {host}:{port}: {exc}") from None
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    print(f"fault proxy listening on {server.url} -> {server.upstream.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        logger.info("fault proxy stopped; requests it was holding are dropped")


def parse_targets(values: Sequence[str]) -> dict[str, str]:
    targets = {}
    for value in values:
        name, sep, pattern = value.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--target {value!r}: expected NAME='METHOD /path'")
        Pattern.parse(pattern)
        targets[name.strip()] = pattern.strip()
    return targets


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m harness.faultproxy",
        description="Forward to one upstream over HTTP and inject faults (test equipment).",
    )
    parser.add_argument("--upstream", required=True, help="base URL to forward every request to")
    parser.add_argument(
        "--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=8766, help="TCP port; 0 picks a free one")
    parser.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="NAME='METHOD /path'",
        help="name a target for faults and stats, e.g. crm.create='POST /api/cases/' (repeat)",
    )
    parser.add_argument(
        "--upstream-timeout",
        type=float,
        default=DEFAULT_UPSTREAM_TIMEOUT_SECONDS,
        help="seconds to wait for the upstream's answer (default 60)",
    )
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=None,
        help="stop when this process (the one that started the proxy) is gone",
    )
    args = parser.parse_args(argv)
    try:
        targets = parse_targets(args.target)
        loopback_host(args.host)
        Upstream.parse(args.upstream)
    except ValueError as exc:
        parser.error(str(exc))
    serve(
        args.upstream,
        args.host,
        args.port,
        targets=targets,
        upstream_timeout=args.upstream_timeout,
        parent_pid=args.parent_pid,
    )
