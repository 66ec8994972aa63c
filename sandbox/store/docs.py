"""The fake document store: numbered versions per document, and access that can be revoked."""

from __future__ import annotations

import sqlite3
from typing import Any

from sandbox.store.base import StoreBase, iso, utc_now


class DocsStore(StoreBase):
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


def docs_stats(conn: sqlite3.Connection) -> dict[str, Any]:
    docs = conn.execute(
        "SELECT COUNT(DISTINCT doc_id) AS total, COUNT(*) AS versions FROM doc_versions"
    ).fetchone()
    return {"total": docs["total"], "versions": docs["versions"]}
