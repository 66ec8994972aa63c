"""Admin: an integration's row (kind, address, timeouts, capabilities, limits) is edited here,
every change journalled. Saving runs Integration.clean: the timeouts' order and what the chosen
kind needs (a BottleCRM row needs a token, and serves only the CRM). Pausing and resuming stay
in the console, with a reason (ledger.services).
"""

from django import forms
from django.contrib import admin
from django.db import transaction

from config.destinations import shown, validate_address
from ledger import journal, messages
from ledger.models import Integration
from ledger.rates import RateFormField
from ledger.services.integrations import token_must_be_retyped

SECRET_FIELDS = set(Integration.SECRET_FIELDS)


class IntegrationAdminForm(forms.ModelForm):
    """The token is never rendered: the page says whether one is set, and an empty field keeps
    it (unless the address changes: then it must be typed again, or removed)."""

    remove_token = forms.BooleanField(required=False, label="Remove the token")

    class Meta:
        model = Integration
        fields = Integration.CONFIGURABLE
        widgets = {"token": forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "base_url" in self.fields:  # the rule at the field, so clean() sees only a valid one
            self.fields["base_url"].validators = [validate_address]
        if "token" in self.fields:
            self.fields["token"].required = False
            self.initial["token"] = ""
            stored = "A token is set" if self.instance.token else "No token is set"
            self.fields["token"].help_text = (
                f"{stored}. Leave empty to keep it, unless the address changes: then type it "
                "again. It is never shown or journalled."
            )

    def clean(self):
        data = super().clean()
        typed = data.get("token")
        if data.get("remove_token") and typed:
            self.add_error("token", messages.TOKEN_TYPED_AND_REMOVED)
        answer = {"token": typed or ""} if typed or data.get("remove_token") else {}
        # Before _post_clean, the instance is still the row as stored.
        if (
            self.instance.pk
            and "base_url" in data  # an address refused by the rule is said on its own
            and token_must_be_retyped(self.instance, {"base_url": data["base_url"], **answer})
        ):
            self.add_error("token", messages.TOKEN_AGAIN_FOR_NEW_ADDRESS)
        return data

    def _post_clean(self):
        if "token" in self.fields and not self.cleaned_data.get("token"):
            keep = "" if self.cleaned_data.get("remove_token") else self.instance.token
            self.cleaned_data["token"] = keep
        super()._post_clean()

    @property
    def changed_data(self):
        changed = [name for name in super().changed_data if name != "remove_token"]
        if self.cleaned_data.get("remove_token") and "token" not in changed:
            changed.append("token")
        return changed


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

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "max_requests_per_second":
            # The one rule for a rate (ledger.rates.parse_rate), as on the console's form.
            kwargs["form_class"] = RateFormField
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    form = IntegrationAdminForm
    fieldsets = (
        (None, {"fields": ("name", "kind", "base_url", "token", "remove_token", "owner")}),
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
                    "read_share",
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
                before, after = "(hidden)", "(removed)" if not after else "(changed)"
            elif name == "base_url":
                before, after = shown(before or ""), shown(after or "")
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
