"""SQLite persistence for the sandbox: records, faults, capabilities and counters.

Everything lives in one SQLite file so that a restarted sandbox process sees exactly what the
previous one committed: records, but also pending faults, capabilities and request counters.
A drill can therefore arm a fault, kill the sandbox and find the fault still armed.

Concurrency model: one connection per call (so per request and per thread), WAL so readers never
block the single writer, and ``BEGIN IMMEDIATE`` for every write so concurrent writers are
serialized up front instead of failing on lock upgrade. ``synchronous=FULL`` makes each COMMIT
durable before the caller goes on to answer the HTTP request.

Standard library only: this module must run without Django.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS crm_enquiries (
    id TEXT PRIMARY KEY,
    reference TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    created_ts REAL NOT NULL,
    closed INTEGER NOT NULL DEFAULT 0,
    close_reason TEXT,
    closed_at TEXT
);
CREATE INDEX IF NOT EXISTS crm_enquiries_reference ON crm_enquiries (reference);

CREATE TABLE IF NOT EXISTS notify_messages (
    id TEXT PRIMARY KEY,
    reference TEXT NOT NULL,
    recipient TEXT NOT NULL,
    template TEXT NOT NULL,
    body TEXT,
    created_at TEXT NOT NULL,
    deliver_at_ts REAL NOT NULL,
    will_fail INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS notify_messages_reference ON notify_messages (reference);

CREATE TABLE IF NOT EXISTS doc_versions (
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (doc_id, version)
);

CREATE TABLE IF NOT EXISTS doc_access (
    doc_id TEXT PRIMARY KEY,
    allowed INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    response TEXT NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE TABLE IF NOT EXISTS faults (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    target TEXT NOT NULL,
    mode TEXT NOT NULL,
    remaining INTEGER NOT NULL,
    delay_ms INTEGER
);

CREATE TABLE IF NOT EXISTS faults_fired (
    target TEXT NOT NULL,
    mode TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (target, mode)
);

CREATE TABLE IF NOT EXISTS request_counts (
    target TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);

-- Every service request by method and path as sent (still percent-encoded), routed or not:
-- what a test reads to prove that no request reached a path it should not have.
CREATE TABLE IF NOT EXISTS request_paths (
    request TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);
-- Every service call's arrival (seconds since the epoch), for the per-second counts and the
-- rate limit; rows older than REQUEST_LOG_SECONDS are dropped as new ones come in.
CREATE TABLE IF NOT EXISTS request_log (
    at REAL NOT NULL,
    target TEXT NOT NULL,
    limited INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS request_log_at ON request_log (at);

CREATE TABLE IF NOT EXISTS capabilities (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

# A reset empties every table but keeps the schema.
RESET_STATEMENTS = (
    "DELETE FROM crm_enquiries",
    "DELETE FROM notify_messages",
    "DELETE FROM doc_versions",
    "DELETE FROM doc_access",
    "DELETE FROM idempotency_keys",
    "DELETE FROM faults",
    "DELETE FROM faults_fired",
    "DELETE FROM request_counts",
    "DELETE FROM request_paths",
    "DELETE FROM request_log",
    "DELETE FROM capabilities",
)

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

# Generous: writers queue behind each other under BEGIN IMMEDIATE, never fail fast.
BUSY_TIMEOUT_SECONDS = 30.0


class IdempotencyKeyReusedError(Exception):
    """The Idempotency-Key was already used with a different request body."""


@dataclass(frozen=True)
class Fault:
    target: str
    mode: str
    delay_ms: int | None


@dataclass(frozen=True)
class Created:
    """Outcome of an idempotent create: the response body and whether it is a replay."""

    response: dict[str, Any]
    replayed: bool


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def body_fingerprint(payload: Any) -> str:
    """Hash of the request body, insensitive to key order and whitespace."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._initialise()

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; we issue BEGIN ourselves.
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            # One snapshot for the whole read, so stats are internally consistent.
            conn.execute("BEGIN")
            yield conn
            conn.execute("COMMIT")
        finally:
            conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            # IMMEDIATE takes the write lock now: concurrent creates queue here, so the
            # "does this idempotency key exist?" check and the insert cannot interleave.
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _initialise(self) -> None:
        conn = self._connect()
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version not in (0, SCHEMA_VERSION):
                raise RuntimeError(
                    f"{self.path} has sandbox schema version {version}, expected "
                    f"{SCHEMA_VERSION}; delete the file or use another --data path"
                )
            # WAL is a property of the file, so setting it once here covers every connection.
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(SCHEMA)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        finally:
            conn.close()

    # -- control: capabilities, faults, counters, reset ----------------------------------------

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
            return _take_fault(conn, target)

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

    def stats(self) -> dict[str, Any]:
        with self._read() as conn:
            crm = conn.execute(
                "SELECT COUNT(*) AS total, COALESCE(SUM(closed), 0) AS closed FROM crm_enquiries"
            ).fetchone()
            notify_total = conn.execute("SELECT COUNT(*) FROM notify_messages").fetchone()[0]
            docs = conn.execute(
                "SELECT COUNT(DISTINCT doc_id) AS total, COUNT(*) AS versions FROM doc_versions"
            ).fetchone()
            return {
                "crm": {
                    "total": crm["total"],
                    "open": crm["total"] - crm["closed"],
                    "closed": crm["closed"],
                    "by_reference": _count_by_reference(
                        conn.execute(
                            "SELECT reference, COUNT(*) AS n FROM crm_enquiries "
                            "GROUP BY reference ORDER BY reference"
                        )
                    ),
                },
                "notify": {
                    "total": notify_total,
                    "by_reference": _count_by_reference(
                        conn.execute(
                            "SELECT reference, COUNT(*) AS n FROM notify_messages "
                            "GROUP BY reference ORDER BY reference"
                        )
                    ),
                },
                "docs": {"total": docs["total"], "versions": docs["versions"]},
                "requests": {
                    row["target"]: row["count"]
                    for row in conn.execute(
                        "SELECT target, count FROM request_counts ORDER BY target"
                    )
                },
                "paths": {
                    row["request"]: row["count"]
                    for row in conn.execute(
                        "SELECT request, count FROM request_paths ORDER BY request"
                    )
                },
                "faults_fired": _faults_fired(conn),
                **_arrivals(conn),
                "faults_pending": _pending_faults(conn),
                "capabilities": _capabilities(conn),
            }

    # -- CRM -----------------------------------------------------------------------------------

    def create_enquiry(self, payload: dict[str, Any], idempotency_key: str | None) -> Created:
        def insert(conn: sqlite3.Connection) -> dict[str, Any]:
            now = utc_now()
            record_id = new_id("crm")
            conn.execute(
                "INSERT INTO crm_enquiries (id, reference, data, created_at, created_ts) "
                "VALUES (?, ?, ?, ?, ?)",
                (record_id, payload["reference"], json.dumps(payload), iso(now), now.timestamp()),
            )
            return {"id": record_id, "reference": payload["reference"], "created_at": iso(now)}

        return self._create_once("crm.create", payload, idempotency_key, insert)

    def find_enquiries(self, reference: str, lag_seconds: float) -> list[dict[str, Any]]:
        # Records younger than the lag are invisible, like a search index that catches up late.
        visible_before = time.time() - lag_seconds
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM crm_enquiries WHERE reference = ? AND created_ts <= ? "
                "ORDER BY created_ts, id",
                (reference, visible_before),
            ).fetchall()
        return [_enquiry(row) for row in rows]

    def get_enquiry(self, record_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM crm_enquiries WHERE id = ?", (record_id,)).fetchone()
        return _enquiry(row) if row else None

    def close_enquiry(self, record_id: str, reason: str | None) -> dict[str, Any] | None:
        with self._write() as conn:
            # Only an open record changes: a second close keeps the first reason and time.
            conn.execute(
                "UPDATE crm_enquiries SET closed = 1, close_reason = ?, closed_at = ? "
                "WHERE id = ? AND closed = 0",
                (reason, iso(utc_now()), record_id),
            )
            row = conn.execute("SELECT * FROM crm_enquiries WHERE id = ?", (record_id,)).fetchone()
        return _enquiry(row) if row else None

    # -- notifications -------------------------------------------------------------------------

    def send_message(
        self, payload: dict[str, Any], idempotency_key: str | None, delivery_delay_ms: float
    ) -> Created:
        def insert(conn: sqlite3.Connection) -> dict[str, Any]:
            now = utc_now()
            message_id = new_id("msg")
            # The delivery outcome is decided now, at send time, by any armed notify.deliver
            # fault; only a genuinely new message consumes one (a replay sends nothing).
            deliver_fault = _take_fault(conn, "notify.deliver")
            will_fail = deliver_fault is not None and deliver_fault.mode == "fail"
            conn.execute(
                "INSERT INTO notify_messages (id, reference, recipient, template, body, "
                "created_at, deliver_at_ts, will_fail) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    message_id,
                    payload["reference"],
                    payload["to"],
                    payload["template"],
                    payload.get("body"),
                    iso(now),
                    now.timestamp() + delivery_delay_ms / 1000.0,
                    int(will_fail),
                ),
            )
            return {"id": message_id, "status": "accepted"}

        return self._create_once("notify.send", payload, idempotency_key, insert)

    def get_message(self, message_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT * FROM notify_messages WHERE id = ?", (message_id,)
            ).fetchone()
        return _message(row, time.time()) if row else None

    def find_messages(self, reference: str) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM notify_messages WHERE reference = ? ORDER BY created_at, id",
                (reference,),
            ).fetchall()
        now = time.time()
        return [_message(row, now) for row in rows]

    # -- documents -----------------------------------------------------------------------------

    def put_document(self, doc_id: str, content_type: str, content: str) -> dict[str, Any]:
        with self._write() as conn:
            latest = conn.execute(
                "SELECT COALESCE(MAX(version), 0) FROM doc_versions WHERE doc_id = ?", (doc_id,)
            ).fetchone()[0]
            version = latest + 1
            conn.execute(
                "INSERT INTO doc_versions (doc_id, version, content_type, content, created_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (doc_id, version, content_type, content, iso(utc_now())),
            )
        return {"id": doc_id, "version": version}

    def get_document(self, doc_id: str, version: int | None) -> dict[str, Any] | None:
        with self._read() as conn:
            if version is None:
                row = conn.execute(
                    "SELECT * FROM doc_versions WHERE doc_id = ? ORDER BY version DESC LIMIT 1",
                    (doc_id,),
                ).fetchone()
            else:
                row = conn.execute(
                    "SELECT * FROM doc_versions WHERE doc_id = ? AND version = ?",
                    (doc_id, version),
                ).fetchone()
        if row is None:
            return None
        return {
            "id": row["doc_id"],
            "version": row["version"],
            "content_type": row["content_type"],
            "content": row["content"],
            "created_at": row["created_at"],
        }

    def document_allowed(self, doc_id: str) -> bool:
        with self._read() as conn:
            row = conn.execute(
                "SELECT allowed FROM doc_access WHERE doc_id = ?", (doc_id,)
            ).fetchone()
        return row is None or bool(row["allowed"])

    def set_document_access(self, doc_id: str, allowed: bool) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO doc_access (doc_id, allowed) VALUES (?, ?) "
                "ON CONFLICT (doc_id) DO UPDATE SET allowed = excluded.allowed",
                (doc_id, int(allowed)),
            )

    # -- shared --------------------------------------------------------------------------------

    def _create_once(
        self,
        scope: str,
        payload: dict[str, Any],
        idempotency_key: str | None,
        insert: Callable[[sqlite3.Connection], dict[str, Any]],
    ) -> Created:
        """Run ``insert`` at most once per idempotency key, all inside one write transaction.

        The key lookup, the insert and the saved response commit together, so 20 concurrent
        requests with one key produce one record and 19 replays of its response.
        """
        fingerprint = body_fingerprint(payload)
        with self._write() as conn:
            if idempotency_key is not None:
                seen = conn.execute(
                    "SELECT body_hash, response FROM idempotency_keys WHERE scope = ? AND key = ?",
                    (scope, idempotency_key),
                ).fetchone()
                if seen is not None:
                    if seen["body_hash"] != fingerprint:
                        raise IdempotencyKeyReusedError(idempotency_key)
                    return Created(json.loads(seen["response"]), replayed=True)
            response = insert(conn)
            if idempotency_key is not None:
                conn.execute(
                    "INSERT INTO idempotency_keys (scope, key, body_hash, response) "
                    "VALUES (?, ?, ?, ?)",
                    (scope, idempotency_key, fingerprint, json.dumps(response)),
                )
            return Created(response, replayed=False)


# -- row helpers (take an open connection so they can run inside a caller's transaction) -------


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


def _take_fault(conn: sqlite3.Connection, target: str) -> Fault | None:
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


def _count_by_reference(rows: Iterable[sqlite3.Row]) -> dict[str, int]:
    return {row["reference"]: row["n"] for row in rows}


def _enquiry(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "reference": row["reference"],
        "created_at": row["created_at"],
        "closed": bool(row["closed"]),
        "close_reason": row["close_reason"],
        "closed_at": row["closed_at"],
        "data": json.loads(row["data"]),
    }


def _message(row: sqlite3.Row, now: float) -> dict[str, Any]:
    if now < row["deliver_at_ts"]:
        status = "accepted"
    else:
        status = "failed" if row["will_fail"] else "delivered"
    return {
        "id": row["id"],
        "reference": row["reference"],
        "status": status,
        "to": row["recipient"],
        "template": row["template"],
        "created_at": row["created_at"],
    }
