"""The fake notification provider's messages: idempotent send, delivery decided at send time."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sandbox.store.base import Created, StoreBase, count_by_reference, iso, new_id, utc_now
from sandbox.store.control import take_fault


class NotifyStore(StoreBase):
    def send_message(
        self, payload: dict[str, Any], idempotency_key: str | None, delivery_delay_ms: float
    ) -> Created:
        def insert(conn: sqlite3.Connection) -> dict[str, Any]:
            now = utc_now()
            message_id = new_id("msg")
            # The delivery outcome is decided now, at send time, by any armed notify.deliver
            # fault; only a genuinely new message consumes one (a replay sends nothing).
            deliver_fault = take_fault(conn, "notify.deliver")
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


def notify_stats(conn: sqlite3.Connection) -> dict[str, Any]:
    return {
        "total": conn.execute("SELECT COUNT(*) FROM notify_messages").fetchone()[0],
        "by_reference": count_by_reference(
            conn.execute(
                "SELECT reference, COUNT(*) AS n FROM notify_messages "
                "GROUP BY reference ORDER BY reference"
            )
        ),
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
