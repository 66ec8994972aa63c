"""The integration rows as they were before the drill: written to a file before the drill
changes them, put back at the end, also by the next run when a run was killed outright."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction

from ledger.models import Integration

DRILL_DIR = Path(settings.BASE_DIR) / "var" / "drill"
BACKUP_FIELDS = [
    "kind",
    "base_url",
    "token",
    "timeout_seconds",
    "retry_budget",
    "backoff_seconds",
    "supports_lookup",
    "supports_idempotency_key",
    "settle_delay_seconds",
    "max_age_seconds",
    "paused",
    "paused_at",
    "paused_by_id",
    "pause_reason",
    "awaiting_backlog_review",
]


def row_values(row) -> dict:
    values = {}
    for name in BACKUP_FIELDS:
        value = getattr(row, name)
        values[name] = value.isoformat() if isinstance(value, datetime) else value
    return values


def backup_path() -> Path:
    """One backup file per database, so drills on different databases never mix them up."""
    s = connection.settings_dict
    where = f"{s.get('HOST') or ''}:{s.get('PORT') or ''}/{s['NAME']}"
    return DRILL_DIR / f"integrations-{hashlib.sha256(where.encode()).hexdigest()[:12]}.json"


def restore_integrations(path: Path | None = None) -> bool:
    """Put the Integration rows back as the backup file has them; True if there was one."""
    path = path or backup_path()
    if not path.exists():
        return False
    saved = json.loads(path.read_text())
    with transaction.atomic():
        for name, values in saved.items():
            values = dict(values)
            if values.get("paused_at"):
                values["paused_at"] = datetime.fromisoformat(values["paused_at"])
            Integration.objects.filter(name=name).update(**values)
    path.unlink()
    return True
