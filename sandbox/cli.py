"""Command-line options shared by ``python -m sandbox`` and ``manage.py runsandbox``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="TCP port (default 8765)")
    parser.add_argument(
        "--data",
        default="var/sandbox.sqlite3",
        help="SQLite file holding records, faults and capabilities (default var/sandbox.sqlite3)",
    )
    parser.add_argument(
        "--token", default=None, help="require 'Authorization: Bearer TOKEN' on service calls"
    )
    parser.add_argument("--threads", type=int, default=16, help="worker threads (default 16)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox",
        description="Fake CRM, notifications, documents and appointments with fault injection.",
    )
    add_serve_arguments(parser)
    args = parser.parse_args(argv)

    from sandbox.server import serve

    serve(host=args.host, port=args.port, data=args.data, token=args.token, threads=args.threads)
