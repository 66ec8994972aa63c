"""Admin: an integration's row (kind, address, timeouts, capabilities, limits) is edited here,
every change journalled. Saving runs Integration.clean: the timeouts' order and what the chosen
kind needs (a BottleCRM row needs a token, and serves only the CRM). Pausing and resuming stay
in the console, with a reason (ledger.services).
"""

from django.contrib import admin
from django.db import models, transaction

from ledger import journal
from ledger.limits import RateFormField
from ledger.models import Integration

SECRET_FIELDS = set(Integration.SECRET_FIELDS)


@admin.register(Integration)
class IntegrationAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "kind",
        "base_url",
        "max_requests_per_second",
        "max_in_flight",
        "paused",
        "owner",
    )
    list_filter = ("kind", "paused")
    # An address typed without a scheme is taken as https (Django 6's default, chosen now).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "max_requests_per_second":
            # The one rule for a rate (ledger.limits.parse_rate), as on the console's form.
            kwargs["form_class"] = RateFormField
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    fieldsets = (
        (None, {"fields": ("name", "kind", "base_url", "token", "owner")}),
        (
            "Calls",
            {
                "fields": (
                    "timeout_seconds",
                    "retry_budget",
                    "backoff_seconds",
                    "supports_lookup",
                    "supports_idempotency_key",
                    "settle_delay_seconds",
                    "max_age_seconds",
                )
            },
        ),
        (
            "Limits",
            {
                "fields": (
                    "max_requests_per_second",
                    "max_in_flight",
                    "throttled_until",
                    "throttle_reason",
                ),
                "description": "They hold across every worker on every machine, for writes, "
                "look-ups and reads alike. A 429 from the destination sets 'throttled until': "
                "nothing is sent to it before then (docs/integrations.md, 'Limits').",
            },
        ),
        ("Pause", {"fields": ("paused", "paused_at", "pause_reason")}),
    )
    readonly_fields = (
        "name",
        "throttled_until",
        "throttle_reason",
        "paused",
        "paused_at",
        "pause_reason",
    )

    def has_add_permission(self, request):
        return False  # the four rows are made from the environment (ledger.integrations)

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        changes = {}
        for name in form.changed_data:
            before = form.initial.get(name)
            after = form.cleaned_data.get(name)
            if name in SECRET_FIELDS:
                before, after = "(hidden)", "(changed)"
            changes[name] = [_plain(before), _plain(after)]
        if change and not form.changed_data:
            return
        with transaction.atomic():
            # Only the form's fields: a throttle or a pause written meanwhile stays as it is.
            obj.save(update_fields=form.changed_data if change else None)
            if changes:
                journal.record(
                    obj,
                    "ledger.integration.changed",
                    actor=request.user,
                    reason=f"edited in the admin: {', '.join(sorted(changes))}",
                    evidence={"changes": changes},
                )


def _plain(value):
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(getattr(value, "pk", value))
