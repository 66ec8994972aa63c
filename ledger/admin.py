from django.contrib import admin
from django.db import models

from ledger.models import Integration


@admin.register(Integration)
class IntegrationAdmin(admin.ModelAdmin):
    """The integration rows, for admins. Saving runs Integration.clean: the timeouts' order and
    what the chosen kind needs (a BottleCRM row needs a token, and serves only the CRM)."""

    list_display = ("name", "kind", "base_url", "paused", "owner")
    list_filter = ("kind", "paused")
    fields = (
        "name",
        "kind",
        "base_url",
        "token",
        "timeout_seconds",
        "retry_budget",
        "backoff_seconds",
        "supports_lookup",
        "supports_idempotency_key",
        "settle_delay_seconds",
        "owner",
    )
    readonly_fields = ("name",)
    # An address typed without a scheme is taken as https (Django 6's default, chosen now).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def has_add_permission(self, request):
        return False  # seeded from the environment (ledger.integrations)

    def has_delete_permission(self, request, obj=None):
        return False  # operations point at their integration
