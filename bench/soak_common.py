"""What every part of the soak (bench/soak.py) shares: where it runs, the source its events
come from, its log line, and the helpers that survive a database restart."""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "soak"


def log(text: str):
    print(f"[soak {time.strftime('%H:%M:%S')}] {text}", flush=True)


def db_retry(call, *, attempts=120, pause=0.5):
    """Run ``call()``; while the database is restarting, reconnect and try again."""
    from django.db import InterfaceError, OperationalError, connection

    for attempt in range(attempts):
        try:
            return call()
        except (OperationalError, InterfaceError):
            connection.close()
            if attempt == attempts - 1:
                raise
            time.sleep(pause)
    return None


def close_thread_connection():
    from django.db import connection

    connection.close()
