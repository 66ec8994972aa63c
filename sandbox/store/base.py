"""The sandbox store's connections, transactions and idempotent creates, shared by every service.

Concurrency model: one connection per call (so per request and per thread), WAL so readers never
block the single writer, and ``BEGIN IMMEDIATE`` for every write so concurrent writers are
serialized up front instead of failing on lock upgrade. ``synchronous=FULL`` makes each COMMIT
durable before the caller goes on to answer the HTTP request.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandbox.store.schema import SCHEMA, SCHEMA_VERSION

# Generous: writers queue behind each other under BEGIN IMMEDIATE, never fail fast.
BUSY_TIMEOUT_SECONDS = 30.0


class IdempotencyKeyReusedError(Exception):
    """The Idempotency-Key was already used with a different request body."""


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


def count_by_reference(rows: Iterable[sqlite3.Row]) -> dict[str, int]:
    return {row["reference"]: row["n"] for row in rows}


class StoreBase:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._initialise()

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
