"""Serving the sandbox (``sandbox.app``) over HTTP under waitress, a real threaded server: what
``python -m sandbox`` and ``manage.py runsandbox`` run. waitress is imported only inside these
functions, so importing this module loads neither it nor Django.
"""

from __future__ import annotations

import logging
import signal
import socket
import struct
import sys
import threading
from typing import Any

from sandbox.app import SandboxApp
from sandbox.store import Store

logger = logging.getLogger("sandbox")


def abort_waitress_connection(environ: dict[str, Any]) -> None:
    """Close the client's TCP connection with a RST and no HTTP response, under waitress.

    waitress exposes its channel only through the ``waitress.client_disconnected`` callable (a
    bound method of the channel). Setting SO_LINGER to 0 makes the eventual close() send a RST
    instead of a FIN. Raising waitress's ClientDisconnected makes it close the channel quietly
    without writing anything, where any other exception would become a 500 response.
    """
    from waitress.channel import ClientDisconnected

    channel = getattr(environ.get("waitress.client_disconnected"), "__self__", None)
    sock = getattr(channel, "socket", None)
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raise ClientDisconnected("sandbox fault: reset_before_commit")


def serve(
    host: str = "127.0.0.1",
    port: int = 8765,
    data: str = "var/sandbox.sqlite3",
    token: str | None = None,
    threads: int = 16,
) -> None:
    """Serve the sandbox over HTTP with waitress until SIGTERM or Ctrl-C."""
    from waitress import create_server

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = SandboxApp(Store(data), token=token, abort_connection=abort_waitress_connection)
    server = create_server(app, host=host, port=port, threads=threads, ident="handover-sandbox")
    if threading.current_thread() is threading.main_thread():
        # SIGTERM becomes SystemExit, which waitress's run() turns into an orderly close.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    logger.info(
        "sandbox serving http://%s:%s data=%s token=%s threads=%s",
        host,
        getattr(server, "effective_port", port),
        data,
        "on" if token else "off",
        threads,
    )
    try:
        server.run()
    finally:
        close_waitress_server(server)
    logger.info("sandbox stopped")


def close_waitress_server(server: Any) -> None:
    """Close the listening socket, open connections and waitress's wake-up pipe.

    A single-socket waitress server's run() only stops the worker threads on SystemExit.
    """
    from waitress import wasyncore

    socket_map = getattr(server, "map", None) or getattr(server, "_map", None)
    if socket_map:
        wasyncore.close_all(socket_map)
    else:
        server.close()
