"""The fake CRM's enquiries: idempotent create, look-up by reference (with a lag), close."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from sandbox.store.base import Created, StoreBase, count_by_reference, iso, new_id, utc_now


class CrmStore(StoreBase):
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


def crm_stats(conn: sqlite3.Connection) -> dict[str, Any]:
    crm = conn.execute(
        "SELECT COUNT(*) AS total, COALESCE(SUM(closed), 0) AS closed FROM crm_enquiries"
    ).fetchone()
    return {
        "total": crm["total"],
        "open": crm["total"] - crm["closed"],
        "closed": crm["closed"],
        "by_reference": count_by_reference(
            conn.execute(
                "SELECT reference, COUNT(*) AS n FROM crm_enquiries "
                "GROUP BY reference ORDER BY reference"
            )
        ),
    }


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
