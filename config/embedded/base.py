"""The database backend used when DATABASE_URL is unset: Django's PostgreSQL backend, which
starts (or joins) the embedded PostgreSQL under var/pgdata when a connection is first made.

The settings name this backend and nothing else (config.db.database_settings), so loading them
starts nothing; the first connection of a process starts the server, and its address is then
written into the connection's settings and into DATABASE_URL, so child processes (workers, the
web server, the sandbox, test subprocesses) use the same server directly.
"""

import os
import threading
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.db.backends.postgresql import base, client

from config.db import embedded_database_url

_started: dict[str, str] = {}
_starting = threading.Lock()


def embedded_address() -> dict[str, str]:
    """HOST and PORT of the embedded server, started on first use (once per process)."""
    with _starting:
        if not _started:
            url = embedded_database_url(settings.BASE_DIR)
            if not os.environ.get("DATABASE_URL"):  # unset or empty: this server, for children
                os.environ["DATABASE_URL"] = url
            parts = urlsplit(url)
            host = parse_qs(parts.query).get("host", [parts.hostname or ""])[0]
            _started.update(HOST=host, PORT=str(parts.port or ""))
    return dict(_started)


class DatabaseClient(client.DatabaseClient):
    """``manage.py dbshell``: psql is given the server's address, started if need be."""

    def runshell(self, parameters):
        self.connection.find_server()
        super().runshell(parameters)


class DatabaseWrapper(base.DatabaseWrapper):
    client_class = DatabaseClient

    def find_server(self) -> None:
        """Start (or join) the embedded server and put its address in this connection's
        settings. The settings dict is shared by every connection to this alias (and copied
        into a test database's): filling it in once gives each of them, and
        config.db.connection_url, the server's real address."""
        if not self.settings_dict.get("HOST"):
            self.settings_dict.update(embedded_address())

    def get_connection_params(self):
        self.find_server()
        return super().get_connection_params()
