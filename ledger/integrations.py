"""Integration rows, seeded from the environment the first time they are needed.

Per integration (prefix CRM, NOTIFY, DOCS, APPOINTMENTS; see .env.example):
``<P>_KIND`` (the API its destination speaks: ``handover``, default; ``bottlecrm`` for the
CRM; ``smtp`` for notifications; ``caldav`` for appointments), ``<P>_BASE_URL``, ``<P>_TOKEN``
(default INTEGRATION_TOKEN), ``<P>_TIMEOUT_SECONDS`` (default CONNECTOR_TIMEOUT_SECONDS),
``<P>_RETRY_BUDGET``, ``<P>_BACKOFF_SECONDS``, ``<P>_LOOKUP`` and ``<P>_IDEMPOTENCY_KEY``
(capabilities, defaulting to what the kind declares), ``<P>_SETTLE_DELAY_SECONDS`` (default:
the kind's minimum), ``<P>_MAX_AGE_SECONDS`` (how old a read may be: 300), ``<P>_OWNER`` (a
username) and ``<P>_PAUSED``. ``NOTIFY_KIND=smtp`` takes the relay from Django's e-mail settings
instead: ``EMAIL_HOST``, ``EMAIL_PORT``, ``EMAIL_USE_TLS``/``EMAIL_USE_SSL`` and
``EMAIL_HOST_USER`` make the address (``smtp+starttls://user@host:587``), ``EMAIL_HOST_PASSWORD``
the token and ``EMAIL_TIMEOUT`` the timeout; its transient failures are retried by e-mail's
window (``EMAIL_RETRY_*``, ledger.policies.retry_schedule), not by ``NOTIFY_RETRY_BUDGET``.
After the first seeding the row is the truth: an
admin's edits are never overwritten by a restart.
"""

import os

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from config.env import env_bool, env_float, env_int, env_str
from ledger.kinds import HANDOVER, KINDS, SMTP
from ledger.models import MAX_AGE_BOUNDS, Integration
from ledger.rates import parse_rate

PREFIX = {
    Integration.CRM: "CRM",
    Integration.NOTIFY: "NOTIFY",
    Integration.DOCUMENTS: "DOCS",
    Integration.APPOINTMENTS: "APPOINTMENTS",
}


def env_rate(name: str) -> float | None:
    """A rate from the environment under the same rule as the forms (ledger.rates.parse_rate);
    a bad value stops the process at start-up, naming the variable."""
    try:
        return parse_rate(os.environ.get(name))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: {exc}") from None


def defaults_from_environment(name: str) -> dict:
    p = PREFIX[name]
    owner_name = env_str(f"{p}_OWNER", "")
    owner = None
    if owner_name:
        owner = get_user_model().objects.filter(username=owner_name).first()
    paused = env_bool(f"{p}_PAUSED", False)
    kind = environment_kind(name)
    declared = KINDS[kind].declared
    if kind == SMTP:
        return {**_defaults(name, p, kind, declared, owner, paused), **relay_from_settings()}
    return _defaults(name, p, kind, declared, owner, paused)


def relay_from_settings() -> dict:
    """An e-mail integration's address, password and timeout from Django's EMAIL_* settings."""
    from urllib.parse import quote

    scheme = "smtps" if settings.EMAIL_USE_SSL else "smtp"
    if settings.EMAIL_USE_TLS:
        scheme = "smtp+starttls"
    user = quote(settings.EMAIL_HOST_USER, safe="") + "@" if settings.EMAIL_HOST_USER else ""
    host = settings.EMAIL_HOST
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return {
        "base_url": f"{scheme}://{user}{host}:{settings.EMAIL_PORT}",
        "token": settings.EMAIL_HOST_PASSWORD,
        "timeout_seconds": settings.EMAIL_TIMEOUT,
    }


def _defaults(name, p, kind, declared, owner, paused) -> dict:
    return {
        "kind": kind,
        "base_url": settings.INTEGRATIONS[name],
        "token": env_str(f"{p}_TOKEN", settings.INTEGRATION_TOKEN),
        "timeout_seconds": env_float(
            f"{p}_TIMEOUT_SECONDS", settings.CONNECTOR_TIMEOUT_SECONDS, minimum=0.1
        ),
        "retry_budget": env_int(f"{p}_RETRY_BUDGET", 3, minimum=1),
        "backoff_seconds": env_float(f"{p}_BACKOFF_SECONDS", 2.0, minimum=0.0),
        "supports_lookup": env_bool(f"{p}_LOOKUP", declared.lookup),
        "supports_idempotency_key": env_bool(f"{p}_IDEMPOTENCY_KEY", declared.idempotency_key),
        "settle_delay_seconds": env_float(
            f"{p}_SETTLE_DELAY_SECONDS", declared.settle_delay_seconds, minimum=0.0
        ),
        "max_age_seconds": env_float(f"{p}_MAX_AGE_SECONDS", 300.0, minimum=MAX_AGE_BOUNDS[0]),
        # Empty: no limit (ledger.limits); admins change them with the rest of the row.
        "max_requests_per_second": env_rate(f"{p}_MAX_REQUESTS_PER_SECOND"),
        "max_in_flight": env_int(f"{p}_MAX_IN_FLIGHT", None, minimum=1),
        # Empty: READS_MAX_IN_FLIGHT (ledger.reads); only reads take a share.
        "read_share": env_int(f"{p}_READ_SHARE", None, minimum=1),
        "owner": owner,
        "paused": paused,
        "pause_reason": "paused from the environment" if paused else "",
    }


def environment_kind(name: str) -> str:
    """``<P>_KIND``, checked loudly: a typo must stop the process, not send to the wrong API."""
    variable = f"{PREFIX[name]}_KIND"
    kind = env_str(variable, HANDOVER).strip().lower()
    if kind not in KINDS:
        known = ", ".join(sorted(KINDS))
        raise ImproperlyConfigured(f"{variable}={kind!r} is not a known kind (use one of: {known})")
    if not KINDS[kind].serves(name):
        raise ImproperlyConfigured(
            f"{variable}={kind!r}: {KINDS[kind].label} cannot serve the {name} integration"
        )
    return kind


def ensure_integrations():
    """Create a row per integration from the environment; never overwrite edits."""
    rows = {}
    # All or none: a bad variable for one integration leaves no half-seeded set behind.
    with transaction.atomic():
        for name, _label in Integration.NAMES:
            rows[name], _ = Integration.objects.get_or_create(
                name=name, defaults=defaults_from_environment(name)
            )
    return rows
