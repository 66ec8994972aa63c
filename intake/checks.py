"""Intake configuration that would otherwise fail only when the first event arrives."""

from django.conf import settings
from django.core.checks import Error, register
from standardwebhooks.webhooks import Webhook


@register()
def intake_secrets_are_usable(app_configs, **kwargs):
    secrets = settings.INTAKE_SECRETS
    hint = 'INTAKE_SECRETS={"website": ["whsec_<base64>", "whsec_<base64 while rotating>"]}'
    if not isinstance(secrets, dict):
        return [Error("INTAKE_SECRETS must be a JSON object.", hint=hint, id="intake.E001")]
    errors = []
    for source, values in secrets.items():
        if not isinstance(values, list) or not values:
            errors.append(
                Error(
                    f"INTAKE_SECRETS[{source!r}] must be a non-empty list.",
                    hint=hint,
                    id="intake.E002",
                )
            )
            continue
        for position, value in enumerate(values):
            try:
                if not isinstance(value, str) or not value.startswith("whsec_"):
                    raise ValueError("not a whsec_ string")
                Webhook(value)
            except Exception as exc:  # any failure to decode is the finding
                errors.append(
                    Error(
                        f"INTAKE_SECRETS[{source!r}][{position}] is not a usable secret "
                        f"({exc.__class__.__name__}).",
                        hint=hint,
                        id="intake.E003",
                    )
                )
    return errors
