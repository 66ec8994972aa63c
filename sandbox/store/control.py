"""The sandbox's control state: capabilities, armed and fired faults, request counters, the
rate limit, reset, and the control part of the stats."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from sandbox.store.base import StoreBase
from sandbox.store.schema import RESET_STATEMENTS

DEFAULT_CAPABILITIES: dict[str, Any] = {
    "lookup": True,
    "idempotency_key": True,
    "lookup_lag_seconds": 0,
    "delivery_delay_ms": 200,
    # Above this many calls in any one second, answer 429 with Retry-After (0: no limit),
    # counting all targets together ("global") or each target on its own ("target").
    "rate_limit_per_second": 0,
    "rate_limit_scope": "global",
}
RATE_LIMIT_SCOPES = ("global", "target")
RATE_LIMITED = "rate_limited"  # the pseudo-fault begin_call() returns for a call over the limit
REQUEST_LOG_SECONDS = 600.0


@dataclass(frozen=True)
class Fault:
    target: str
    mode: str
    delay_ms: int | None


class ControlStore(StoreBase):
    def capabilities(self) -> dict[str, Any]:
        with self._read() as conn:
            return _capabilities(conn)

    def set_capabilities(self, changes: dict[str, Any]) -> dict[str, Any]:
        with self._write() as conn:
            for name, value in changes.items():
                conn.execute(
                    "INSERT INTO capabilities (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (name, json.dumps(value)),
                )
            return _capabilities(conn)

    def add_fault(self, target: str, mode: str, count: int, delay_ms: int | None) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO faults (target, mode, remaining, delay_ms) VALUES (?, ?, ?, ?)",
                (target, mode, count, delay_ms),
            )

    def clear_faults(self) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM faults")

    def pending_faults(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            return _pending_faults(conn)

    def begin_call(self, target: str, *, arrived: float | None = None) -> Fault | None:
        """Count a call to ``target`` that arrived at ``arrived`` (default: now); refuse it
        when over the rate limit (a ``rate_limited`` pseudo-fault whose delay_ms is the
        Retry-After); else consume the oldest fault armed for it, if any."""
        with self._write() as conn:
            now = time.time() if arrived is None else arrived
            conn.execute(
                "INSERT INTO request_counts (target, count) VALUES (?, 1) "
                "ON CONFLICT (target) DO UPDATE SET count = count + 1",
                (target,),
            )
            conn.execute("DELETE FROM request_log WHERE at < ?", (now - REQUEST_LOG_SECONDS,))
            wait = _over_rate_limit(conn, target, now)
            conn.execute(
                "INSERT INTO request_log (at, target, limited) VALUES (?, ?, ?)",
                (now, target, int(wait is not None)),
            )
            if wait is not None:
                return Fault(target=target, mode=RATE_LIMITED, delay_ms=wait)
            return take_fault(conn, target)

    def count_path(self, method: str, raw_path: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO request_paths (request, count) VALUES (?, 1) "
                "ON CONFLICT (request) DO UPDATE SET count = count + 1",
                (f"{method} {raw_path}",),
            )

    def reset(self) -> None:
        with self._write() as conn:
            for statement in RESET_STATEMENTS:
                conn.execute(statement)


# -- row helpers (take an open connection so they can run inside a caller's transaction) -------


def control_stats(conn: sqlite3.Connection) -> dict[str, Any]:
    """The stats' counters, faults and capabilities (the records' counts are the services')."""
    return {
        "requests": {
            row["target"]: row["count"]
            for row in conn.execute("SELECT target, count FROM request_counts ORDER BY target")
        },
        "paths": {
            row["request"]: row["count"]
            for row in conn.execute("SELECT request, count FROM request_paths ORDER BY request")
        },
        "faults_fired": _faults_fired(conn),
        **_arrivals(conn),
        "faults_pending": _pending_faults(conn),
        "capabilities": _capabilities(conn),
    }


def take_fault(conn: sqlite3.Connection, target: str) -> Fault | None:
    # Lowest seq first: faults armed on one target fire in the order they were added.
    row = conn.execute(
        "SELECT seq, mode, remaining, delay_ms FROM faults WHERE target = ? ORDER BY seq LIMIT 1",
        (target,),
    ).fetchone()
    if row is None:
        return None
    if row["remaining"] <= 1:
        conn.execute("DELETE FROM faults WHERE seq = ?", (row["seq"],))
    else:
        conn.execute("UPDATE faults SET remaining = remaining - 1 WHERE seq = ?", (row["seq"],))
    conn.execute(
        "INSERT INTO faults_fired (target, mode, count) VALUES (?, ?, 1) "
        "ON CONFLICT (target, mode) DO UPDATE SET count = count + 1",
        (target, row["mode"]),
    )
    return Fault(target=target, mode=row["mode"], delay_ms=row["delay_ms"])


def _capabilities(conn: sqlite3.Connection) -> dict[str, Any]:
    stored = {
        row["name"]: json.loads(row["value"]) for row in conn.execute("SELECT * FROM capabilities")
    }
    return {**DEFAULT_CAPABILITIES, **stored}


def _over_rate_limit(conn: sqlite3.Connection, target: str, now: float) -> int | None:
    """Milliseconds until the next second starts, when ``rate_limit_per_second`` calls were
    already let in during this one (a fixed one-second window, as the per-second counts, in
    the capability's scope); None when under the limit."""
    capabilities = _capabilities(conn)
    limit = capabilities["rate_limit_per_second"]
    if not limit:
        return None
    second = float(int(now))
    sql = "SELECT COUNT(*) FROM request_log WHERE limited = 0 AND at >= ? AND at < ?"
    params: tuple = (second, second + 1.0)
    if capabilities["rate_limit_scope"] == "target":
        sql += " AND target = ?"
        params = (second, second + 1.0, target)
    (count,) = conn.execute(sql, params).fetchone()
    if count < limit:
        return None
    return max(1, int((second + 1.0 - now) * 1000) + 1)


def _arrivals(conn: sqlite3.Connection) -> dict[str, Any]:
    """Per-second call counts, the most calls in any one-second window (sliding, to the
    microsecond) and the calls refused for the rate limit: per target and for "all"."""
    rows = conn.execute("SELECT at, target, limited FROM request_log ORDER BY at").fetchall()
    times: dict[str, list[float]] = {"all": []}
    per_second: dict[str, dict[str, int]] = {"all": {}}
    limited: dict[str, int] = {}
    for at, target, was_limited in rows:
        second = str(int(at))
        for key in ("all", target):
            times.setdefault(key, []).append(at)
            counts = per_second.setdefault(key, {})
            counts[second] = counts.get(second, 0) + 1
        if was_limited:
            limited[target] = limited.get(target, 0) + 1
            limited["all"] = limited.get("all", 0) + 1
    return {
        "per_second": per_second,
        "max_in_any_second": {key: _max_in_window(values) for key, values in times.items()},
        "rate_limited": limited,
    }


def _max_in_window(times: list[float], window: float = 1.0) -> int:
    """The most of ``times`` (sorted) inside any half-open window [t, t + window)."""
    best = start = 0
    for end, at in enumerate(times):
        while at - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def _pending_faults(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT * FROM faults ORDER BY seq")
    return [
        {
            "target": row["target"],
            "mode": row["mode"],
            "remaining": row["remaining"],
            "delay_ms": row["delay_ms"],
        }
        for row in rows
    ]


def _faults_fired(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    fired: dict[str, dict[str, int]] = {}
    for row in conn.execute("SELECT target, mode, count FROM faults_fired ORDER BY target, mode"):
        fired.setdefault(row["target"], {})[row["mode"]] = row["count"]
    return fired
