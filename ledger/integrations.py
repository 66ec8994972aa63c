"""Integration rows, seeded from the environment the first time they are needed.

Per integration (prefix CRM, NOTIFY, DOCS, APPOINTMENTS; see .env.example):
``<P>_BASE_URL``, ``<P>_TOKEN`` (default INTEGRATION_TOKEN), ``<P>_TIMEOUT_SECONDS`` (default
CONNECTOR_TIMEOUT_SECONDS), ``<P>_RETRY_BUDGET``, ``<P>_BACKOFF_SECONDS``, ``<P>_LOOKUP`` and
``<P>_IDEMPOTENCY_KEY`` (capabilities), ``<P>_SETTLE_DELAY_SECONDS``, ``<P>_OWNER`` (a
username) and ``<P>_PAUSED``. After the first seeding the row is the truth: an admin's edits
are never overwritten by a restart.
"""

from django.conf import settings
from django.contrib.auth import get_user_model

from config.env import env_bool, env_float, env_int, env_str
from ledger.models import Integration

PREFIX = {
    Integration.CRM: "CRM",
    Integration.NOTIFY: "NOTIFY",
    Integration.DOCUMENTS: "DOCS",
    Integration.APPOINTMENTS: "APPOINTMENTS",
}


def defaults_from_environment(name: str) -> dict:
    p = PREFIX[name]
    owner_name = env_str(f"{p}_OWNER", "")
    owner = None
    if owner_name:
        owner = get_user_model().objects.filter(username=owner_name).first()
    paused = env_bool(f"{p}_PAUSED", False)
    return {
        "base_url": settings.INTEGRATIONS[name],
        "token": env_str(f"{p}_TOKEN", settings.INTEGRATION_TOKEN),
        "timeout_seconds": env_float(
            f"{p}_TIMEOUT_SECONDS", settings.CONNECTOR_TIMEOUT_SECONDS, minimum=0.1
        ),
        "retry_budget": env_int(f"{p}_RETRY_BUDGET", 3, minimum=1),
        "backoff_seconds": env_float(f"{p}_BACKOFF_SECONDS", 2.0, minimum=0.0),
        "supports_lookup": env_bool(f"{p}_LOOKUP", True),
        "supports_idempotency_key": env_bool(f"{p}_IDEMPOTENCY_KEY", True),
        "settle_delay_seconds": env_float(f"{p}_SETTLE_DELAY_SECONDS", 0.0, minimum=0.0),
        "owner": owner,
        "paused": paused,
        "pause_reason": "paused from the environment" if paused else "",
    }


def ensure_integrations():
    """Create a row per integration from the environment; never overwrite edits."""
    rows = {}
    for name, _label in Integration.NAMES:
        rows[name], _ = Integration.objects.get_or_create(
            name=name, defaults=defaults_from_environment(name)
        )
    return rows
