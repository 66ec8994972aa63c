"""Django's PostgreSQL backend, with small bulk inserts written as VALUES (compiler.py) and a
health check that costs no round trip while the server has said nothing.

settings.DATABASES["default"]["ENGINE"] = "config.postgresql". Everything else is Django's.
"""

import select

from django.db.backends.postgresql import base
from psycopg import pq

from config.postgresql.operations import DatabaseOperations


def _nothing_to_read(fd: int) -> bool:
    """True when the socket holds no data and no end of file (poll, no waiting)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLPRI)  # POLLHUP and POLLERR come anyway
    return not poller.poll(0)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def is_usable(self):
        """Whether this connection still works; SELECT 1 only when there is a reason to ask.

        Django's check sends SELECT 1 before the first query of every request and every task
        (CONN_HEALTH_CHECKS), so that a connection the server has dropped is replaced instead
        of failing that request. A server that restarts or ends the session
        (pg_terminate_backend, idle_session_timeout) writes a FATAL message and closes the
        socket first, so an idle connection whose socket has nothing to read, not even an end
        of file, has been told nothing, and is used without asking. Anything to read, an
        error since the last check, or an open transaction: Django's SELECT 1 decides.
        What neither way sees without waiting is a server that vanished without a word (a
        host lost to the network); the first query then fails, as after a SELECT 1 that hung.
        """
        conn = self.connection
        if conn is None or conn.closed or conn.pgconn.status != pq.ConnStatus.OK:
            return False
        quiet = (
            not self.errors_occurred
            and conn.info.transaction_status == pq.TransactionStatus.IDLE
            and hasattr(select, "poll")
        )
        try:
            if quiet and _nothing_to_read(conn.fileno()):
                return True
        except (OSError, ValueError):
            return False
        return super().is_usable()
