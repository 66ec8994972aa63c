"""Integration rows, seeded from the environment the first time they are needed."""

from django.conf import settings

from ledger.models import Integration


def ensure_integrations():
    """Create a row per integration from settings (CRM_BASE_URL, ...); never overwrite edits."""
    rows = {}
    for name, _label in Integration.NAMES:
        rows[name], _ = Integration.objects.get_or_create(
            name=name,
            defaults={
                "base_url": settings.INTEGRATIONS[name],
                "token": settings.INTEGRATION_TOKEN,
                "timeout_seconds": settings.CONNECTOR_TIMEOUT_SECONDS,
            },
        )
    return rows
