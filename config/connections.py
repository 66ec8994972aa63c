"""waitress with two bounds on open connections, so idle ones cannot stop the server.

waitress keeps at most ``connection_limit`` connections per process and stops accepting at the
limit; idle ones are closed only after ``channel_timeout``. About 1,000 connections that each
sent one byte (500 per process) therefore left a real request waiting in the listen backlog
until the idle timeout, or longer while they were renewed. This server adds, per process:

- **per client address**: a new connection from an address that already holds
  ``per_client`` open connections is closed at once (a browser opens about six);
- **shedding**: once ``shed_at`` connections are open (80% of the limit), each new connection
  closes the one that has been idle longest (no request being served, nothing received or
  sent for the longest time), so a request from anyone else is accepted at once while idle
  connections exist. A connection whose request is being served is never shed.

waitress has no public hook at accept, nor a public way to build its server on a socket bound
elsewhere: ``GuardedServer`` subclasses its ``TcpWSGIServer`` and reads its channels
(``active_channels``, ``will_close``, ``requests``, ``last_activity``, ``addr``), and
``create_guarded_server`` passes the socket as ``waitress.create_server`` itself does.
tests/foundation/test_library_pins.py pins each of these, so an upgrade that changes one fails
there, not in production.

What was refused or shed is logged as counts, at most every ``REPORT_EVERY_S`` seconds, never
with client addresses. Behind a reverse proxy every connection comes from the proxy's address:
see README.md, Production, for what the proxy must bound itself.
"""

from __future__ import annotations

import logging
import time

from waitress.adjustments import Adjustments
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

log = logging.getLogger("handover.web")

REPORT_EVERY_S = 10.0


def shed_threshold(connection_limit: int) -> int:
    """Open connections from which each new one sheds the longest idle one."""
    return max(1, connection_limit - max(1, connection_limit // 5))


class GuardedServer(TcpWSGIServer):
    """waitress's TCP server with a per-address bound and idle shedding (see the module)."""

    def __init__(self, *args, per_client: int, **kwargs):
        self.per_client = per_client
        self.refused = 0
        self.shed = 0
        self.reported_at = 0.0  # the first refusal or shed is reported at once
        super().__init__(*args, **kwargs)
        self.shed_at = shed_threshold(self.adj.connection_limit)

    def accept(self):
        pair = super().accept()
        if pair is None:
            return None
        conn, addr = pair
        open_channels = [ch for ch in self.active_channels.values() if not ch.will_close]
        if self.per_client and sum(ch.addr[0] == addr[0] for ch in open_channels) >= (
            self.per_client
        ):
            conn.close()
            self.refused += 1
            self._report()
            return None  # waitress's handle_accept makes no channel for None
        if len(open_channels) >= self.shed_at:
            self._shed_one(open_channels)
        return pair

    def _shed_one(self, open_channels) -> None:
        idle = [ch for ch in open_channels if not ch.requests]
        if not idle:
            return
        oldest = min(idle, key=lambda ch: ch.last_activity)
        # Closed by waitress's own loop at its next turn, as its idle timeout does.
        oldest.will_close = True
        self.shed += 1
        self._report()

    def _report(self) -> None:
        now = time.monotonic()
        if now - self.reported_at < REPORT_EVERY_S:
            return
        log.warning(
            "connections closed at accept since the last report: %d over the per-address "
            "bound (WEB_CONNECTIONS_PER_CLIENT=%d), %d idle ones shed at %d open",
            self.refused,
            self.per_client,
            self.shed,
            self.shed_at,
        )
        self.refused = self.shed = 0
        self.reported_at = now


def create_guarded_server(application, *, per_client: int, **adjustments) -> GuardedServer:
    """waitress.server.create_server for one pre-bound TCP socket (``sockets=[sock]``)."""
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
    )
