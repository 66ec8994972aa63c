"""waitress with the standard slow-client defence: time limits on a request, not on idleness.

waitress reads each request whole before a thread sees it, closes a connection only after
``channel_timeout`` seconds with nothing received or sent, and stops accepting at
``connection_limit``. Idleness is the wrong measure: a client that trickles one byte a second
is never idle, and a legitimate upload pausing between chunks looks idle. This server keeps
waitress's parser, threads and limits, and replaces the idle rule with the limits nginx
(``client_header_timeout``) and Apache's mod_reqtimeout (``header=5 body=10,MinRate=500``)
put on a request, per process:

- **header time**: a request's line and headers must be complete within ``header_timeout``
  seconds of the connection being accepted (for the first request) or of the request's first
  byte (for a later one on a kept-alive connection), however steadily they trickle;
- **body rate**: from then, its body has ``body_timeout`` seconds plus one second for every
  ``body_min_rate`` bytes received (a 54 KB upload in ten chunks a second apart has about two
  minutes; one that sends ten bytes and stops, ``body_timeout``);
- **kept-alive** connections between requests, and answers waiting for a slow reader, keep
  waitress's idle rule (``channel_timeout``);
- **per client address**: a new connection from an address that already holds ``per_client``
  open connections is closed at once (a browser opens about six);
- **a connection budget**: once ``shed_at`` connections are open (80% of the limit), each new
  connection closes the open one that has gone longest without delivering a request: a
  kept-alive connection idle longest, or a request whose headers have been arriving longest.
  A request whose headers are complete (its body arriving, within its rate) and one being
  served are never closed to make room, so a client sending at a fair rate is never the one
  cut; only when every open connection is such a request do new ones wait in the backlog.

A readable listening socket accepts up to ``ACCEPT_BATCH`` connections, not one per turn of
the loop as waitress does, so a backlog filled by an attacker drains quickly. A header that
waitress cannot parse on the intake path is answered in the intake contract's JSON
(config/badheaders.py).

waitress has no public hook at accept, for its timers, nor a public way to build its server on
a socket bound elsewhere: ``GuardedServer`` subclasses its ``TcpWSGIServer`` (``accept``,
``handle_accept``, ``maintenance``), ``GuardedChannel`` its ``HTTPChannel`` (``received``,
``request``, ``requests``, ``last_activity``, ``will_close``, ``addr``, ``total_outbufs_len``)
and the parser's ``headers_finished``; ``create_guarded_server`` passes the socket as
``waitress.create_server`` itself does. tests/foundation/test_library_pins.py pins each of
these, so an upgrade that changes one fails there, not in production; docs/decisions/
web-server-connection-guard.md records why this is done here and not by waitress.

What was refused, shed or cut is logged as counts, at most every ``REPORT_EVERY_S`` seconds,
never with client addresses. Behind a reverse proxy every connection comes from the proxy's
address: see README.md, Production, for what the proxy must bound itself.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from config.badheaders import GuardedParser, IntakeAwareErrorTask

log = logging.getLogger("handover.web")

REPORT_EVERY_S = 10.0
# Connections accepted per readable event of the listening socket.
ACCEPT_BATCH = 64
# How often the limits are checked (seconds): a limit is exact to within this.
CHECK_EVERY_S = 1


def shed_threshold(connection_limit: int) -> int:
    """Open connections from which each new one sheds another (see the module)."""
    return max(1, connection_limit - max(1, connection_limit // 5))


class GuardedChannel(HTTPChannel):
    """waitress's connection, with the times its request is measured from.

    ``began``: when the current request's header time started (the accept, for a connection's
    first request; its first byte, for a later one); None between requests. ``body_began``:
    when its headers were complete. ``request_bytes``: bytes received for it so far.
    """

    parser_class = GuardedParser
    error_task_class = IntakeAwareErrorTask
    body_began = None
    request_bytes = 0

    def __init__(self, server, sock, addr, adj, map=None):
        super().__init__(server, sock, addr, adj, map=map)
        self.began = time.monotonic()

    def received(self, data):
        now = time.monotonic()
        before = self.request
        result = super().received(data)
        after = self.request
        if after is None:  # nothing partial: done with, the next request's time not begun
            self.began = self.body_began = None
            self.request_bytes = 0
            return result
        if after is not before:  # a request began in this read
            if before is not None or self.began is None:
                self.began = now
            self.body_began = None
            self.request_bytes = 0
        self.request_bytes += len(data)
        if after.headers_finished and self.body_began is None:
            self.body_began = now
        return result

    def phase(self) -> str:
        """served (a thread has it), sending (its answer is waiting for the reader), idle
        (between requests), headers or body."""
        if self.requests:
            return "served"
        if self.total_outbufs_len:
            return "sending"
        if self.request is None:
            return "idle" if self.began is None else "headers"
        return "body" if self.request.headers_finished else "headers"

    def over_limit(self, now: float, wall: float) -> str | None:
        """Which limit this connection is past, if any (see the module)."""
        server = self.server
        phase = self.phase()
        if phase == "served":
            # Time spent waiting for a thread is not the client's: a request read behind it
            # (pipelined) starts its time when the thread is done with this one.
            if self.began is not None:
                self.began = now
            if self.body_began is not None:
                self.body_began = now
            return None
        if phase in ("idle", "sending"):
            return "idle" if wall - self.last_activity > self.adj.channel_timeout else None
        if self.began is None:  # never left unset in these phases; a fresh start if it were
            self.began = now
        if phase == "headers":
            return "headers" if now - self.began > server.header_timeout else None
        if self.body_began is None:
            self.body_began = now
        allowed = server.body_timeout + self.request_bytes / server.body_min_rate
        return "body" if now - self.body_began > allowed else None

    def shed_key(self, now: float, wall: float) -> float | None:
        """Seconds this connection has gone without delivering a request, or None if it must
        never be shed (its headers are complete, it is being served or answered)."""
        phase = self.phase()
        if phase == "idle":
            return wall - self.last_activity
        if phase == "headers":
            return now - (self.began or now)
        return None


class GuardedServer(TcpWSGIServer):
    """waitress's TCP server with request time limits and a connection budget (the module)."""

    channel_class = GuardedChannel

    def __init__(
        self,
        *args,
        per_client: int,
        header_timeout: float,
        body_timeout: float,
        body_min_rate: int,
        **kwargs,
    ):
        self.per_client = per_client
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.body_min_rate = body_min_rate
        self.counts = Counter()
        self.reported_at = 0.0  # the first refusal, shed or cut is reported at once
        self.backlog_empty = False
        super().__init__(*args, **kwargs)
        self.shed_at = shed_threshold(self.adj.connection_limit)

    def handle_accept(self):
        for _ in range(ACCEPT_BATCH):
            self.backlog_empty = False
            super().handle_accept()
            if self.backlog_empty or len(self._map) >= self.adj.connection_limit:
                return

    def accept(self):
        pair = super().accept()
        if pair is None:
            self.backlog_empty = True
            return None
        conn, addr = pair
        open_channels = [ch for ch in self.active_channels.values() if not ch.will_close]
        if self.per_client and sum(ch.addr[0] == addr[0] for ch in open_channels) >= (
            self.per_client
        ):
            conn.close()
            self._count("refused")
            return None  # waitress's handle_accept makes no channel for None
        if len(open_channels) >= self.shed_at:
            self._shed_one(open_channels)
        return pair

    def _shed_one(self, open_channels) -> None:
        now, wall = time.monotonic(), time.time()
        keyed = [(ch.shed_key(now, wall), ch) for ch in open_channels]
        keyed = [(key, ch) for key, ch in keyed if key is not None]
        if not keyed:
            return
        _key, longest = max(keyed, key=lambda pair: pair[0])
        # Closed by waitress's own loop at its next turn, as its idle timeout does.
        longest.will_close = True
        self._count("shed")

    def maintenance(self, now):
        """waitress calls this every ``cleanup_interval``: close what is past its limit."""
        mono = time.monotonic()
        for channel in list(self.active_channels.values()):
            if channel.will_close:
                continue
            limit = channel.over_limit(mono, now)
            if limit is not None:
                channel.will_close = True
                if limit != "idle":
                    self._count(limit)

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        now = time.monotonic()
        if now - self.reported_at < REPORT_EVERY_S:
            return
        log.warning(
            "connections closed since the last report: %d over the per-address bound "
            "(WEB_CONNECTIONS_PER_CLIENT=%d), %d shed at %d open, %d past the header time "
            "(WEB_HEADER_TIMEOUT=%gs), %d below the body rate (WEB_BODY_MIN_RATE=%d)",
            self.counts["refused"],
            self.per_client,
            self.counts["shed"],
            self.shed_at,
            self.counts["headers"],
            self.header_timeout,
            self.counts["body"],
            self.body_min_rate,
        )
        self.counts.clear()
        self.reported_at = now


def create_guarded_server(
    application,
    *,
    per_client: int,
    header_timeout: float = 5,
    body_timeout: float = 10,
    body_min_rate: int = 500,
    **adjustments,
) -> GuardedServer:
    """waitress.server.create_server for one pre-bound TCP socket (``sockets=[sock]``)."""
    adjustments.setdefault("cleanup_interval", CHECK_EVERY_S)
    adj = Adjustments(**adjustments)
    (sock,) = adj.sockets
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(adj.threads)
    return GuardedServer(
        application,
        map={},
        _sock=sock,
        dispatcher=dispatcher,
        adj=adj,
        bind_socket=False,
        sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()),
        per_client=per_client,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        body_min_rate=body_min_rate,
    )
