"""The web server: ``python -m config.serve`` (what `make run` starts, and production's command).

waitress reads each request whole (headers and body, the body into memory or a temporary file)
in its asynchronous layer before a thread sees it, so a client that stalls or trickles costs one
socket, never a thread. A request's headers must be complete within ``WEB_HEADER_TIMEOUT``
seconds and its body must keep ``WEB_BODY_MIN_RATE`` bytes a second after
``WEB_BODY_TIMEOUT`` seconds' allowance; a kept-alive connection silent for
``WEB_CHANNEL_TIMEOUT`` seconds is closed; a client address holds at most
``WEB_CONNECTIONS_PER_CLIENT`` connections per process, and before the connection limit the
connections that have gone longest without delivering a request are shed, never one whose
body is arriving (config/connections.py).
gunicorn's gthread worker, which this replaces, read bodies in its threads: eight
connections that declared a body and stopped sending held every thread of a 2 x 4 server
(docs/reliability.md, "Slow clients").

One waitress process runs Python on one core, and waitress has no multi-process mode of its own
(its ``serve`` is one process), so ``WEB_PROCESSES`` processes (2 by default)
listen on the same address, each on its own socket (SO_REUSEPORT), bound here before they are
started; the kernel hands each new connection to one of them. Each process loads the Django
application itself, after the fork, so no database connection is ever shared. If one of them
exits, the others are stopped and this command exits non-zero: a supervisor (`make run`,
systemd) restarts the whole server.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from config.lifetime import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
log = logging.getLogger("handover.web")


def _env_int(name: str, default: int, minimum: int) -> int:
    from config.env import env_int

    return env_int(name, default, minimum=minimum)


def options(argv=None) -> argparse.Namespace:
    from dotenv import load_dotenv

    # The same .env the settings read, so WEB_* set there apply here too.
    load_dotenv(ROOT / ".env", override=False)
    p = argparse.ArgumentParser(prog="python -m config.serve", description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:8000", help="host:port (default %(default)s)")
    p.add_argument("--processes", type=int, default=_env_int("WEB_PROCESSES", 2, 1))
    p.add_argument("--threads", type=int, default=_env_int("WEB_THREADS", 4, 1))
    p.add_argument(
        "--channel-timeout",
        type=int,
        default=_env_int("WEB_CHANNEL_TIMEOUT", 10, 1),
        help="close a kept-alive connection between requests, or one not reading its answer, "
        "after this many seconds with nothing sent or received",
    )
    p.add_argument(
        "--header-timeout",
        type=int,
        default=_env_int("WEB_HEADER_TIMEOUT", 5, 1),
        help="a request's line and headers must be complete within this many seconds of the "
        "connection (or of the request's first byte on a kept-alive one)",
    )
    p.add_argument(
        "--body-timeout",
        type=int,
        default=_env_int("WEB_BODY_TIMEOUT", 10, 1),
        help="a body has this many seconds, plus one for every --body-min-rate bytes received",
    )
    p.add_argument(
        "--body-min-rate",
        type=int,
        default=_env_int("WEB_BODY_MIN_RATE", 500, 1),
        help="bytes a second a body must keep up (after --body-timeout's allowance)",
    )
    p.add_argument(
        "--connection-limit",
        type=int,
        default=_env_int("WEB_CONNECTION_LIMIT", 500, 1),
        help="open connections per process; from 80%% of it each new one closes the one that "
        "has gone longest without delivering a request, and at it new ones wait in the backlog",
    )
    p.add_argument(
        "--connections-per-client",
        type=int,
        default=_env_int("WEB_CONNECTIONS_PER_CLIENT", 100, 0),
        help="open connections per client address and process; more are closed at once "
        "(0: no bound, e.g. behind a reverse proxy that bounds them itself)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=_env_int("WEB_MAX_BODY_BYTES", 1024 * 1024, 1024),
        help="larger request bodies are refused with 413 before Django sees them",
    )
    p.add_argument("--app", default="config.wsgi:application", help="module:attribute")
    p.add_argument("--access-log", action="store_true", help="one line per request on stdout")
    return p.parse_args(argv)


def bind(listen: str, backlog: int = 1024) -> socket.socket:
    """A listening socket with SO_REUSEPORT: one per process, all on the same address."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, int(port)))
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


def access_logged(app):
    """Method, path, status and milliseconds; never the query string (it can carry names)."""
    out = logging.getLogger("handover.web.access")

    def wrapped(environ, start_response):
        started = time.monotonic()
        seen = {}

        def recording(status, headers, exc_info=None):
            seen["status"] = status.split(" ", 1)[0]
            return start_response(status, headers, exc_info)

        try:
            return app(environ, recording)
        finally:
            out.info(
                "%s %s %s %.0fms",
                environ.get("REQUEST_METHOD"),
                environ.get("PATH_INFO"),
                seen.get("status", "-"),
                (time.monotonic() - started) * 1000,
            )

    return wrapped


def serve_one(sock: socket.socket, opts: argparse.Namespace) -> None:
    """One process: load the application, then serve ``sock`` until SIGTERM."""
    import importlib

    from config.connections import create_guarded_server

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    module, _, attribute = opts.app.partition(":")
    application = getattr(importlib.import_module(module), attribute or "application")
    app = access_logged(application) if opts.access_log else application
    # waitress's server with request time limits, a per-address bound and a connection budget
    # (config/connections.py).
    server = create_guarded_server(
        app,
        per_client=opts.connections_per_client,
        header_timeout=opts.header_timeout,
        body_timeout=opts.body_timeout,
        body_min_rate=opts.body_min_rate,
        sockets=[sock],
        threads=opts.threads,
        channel_timeout=opts.channel_timeout,
        connection_limit=opts.connection_limit,
        max_request_body_size=opts.max_body_bytes,
        # poll(), not select(): select() cannot watch a descriptor numbered above 1024.
        asyncore_use_poll=True,
        # Pass X-Forwarded-* through, as gunicorn did: Django decides what to trust
        # (SECURE_PROXY_SSL_HEADER, TRUSTED_PROXY_COUNT). waitress 3 would drop them, and a
        # SECURE=1 node behind a TLS proxy would then redirect every request to itself.
        clear_untrusted_proxy_headers=False,
        ident="handover",
    )
    server.run()


def main(argv=None) -> int:
    opts = options(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # One socket per process, each bound here (so a busy port fails before anything starts):
    # the kernel spreads new connections over them. One socket shared by all the processes
    # gave every connection to whichever woke first (8 of 8 senders on one process).
    sockets = [bind(opts.listen) for _ in range(opts.processes)]
    children: list[int] = []
    for own in sockets:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: default signal handling, then serve until told to stop
            die_with_parent(signal.SIGTERM, parent)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            try:
                for other in sockets:
                    if other is not own:
                        other.close()
                serve_one(own, opts)
            finally:
                os._exit(1)
        children.append(pid)
    for sock in sockets:
        sock.close()
    log.info(
        "serving on http://%s (%d processes x %d threads, headers within %ds, bodies at "
        "%d bytes/s after %ds, kept-alive %ds, %d connections per process, %d per client "
        "address)",
        opts.listen,
        opts.processes,
        opts.threads,
        opts.header_timeout,
        opts.body_min_rate,
        opts.body_timeout,
        opts.channel_timeout,
        opts.connection_limit,
        opts.connections_per_client,
    )

    stopping = False

    def stop(*_):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    while not stopping:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid:
            children.remove(pid)
            log.error("web process %d exited (%s); stopping the others", pid, code)
            status = 1
            break
        time.sleep(0.2)
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return status


if __name__ == "__main__":
    sys.exit(main())
