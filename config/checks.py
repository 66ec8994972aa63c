"""System checks for configuration that would otherwise fail quietly in production."""

import os

from django.conf import settings
from django.core.checks import Error, Warning, register


@register()
def timeouts_are_ordered(app_configs, **kwargs):
    """connector HTTP timeout < cluster timeout < retry.

    If a task can outlive the cluster's timeout, the worker is killed mid-call; if the timeout
    reaches the retry, the broker hands the same task to a second worker while the first still
    runs. The ledger's claim protects the record either way, but the order keeps it rare.
    """
    cluster = settings.Q_CLUSTER
    timeout = cluster.get("timeout")
    retry = cluster.get("retry")
    connector = settings.CONNECTOR_TIMEOUT_SECONDS
    errors = []
    if timeout is None or retry is None:
        errors.append(Error("Q_CLUSTER must set both 'timeout' and 'retry'.", id="handover.E001"))
    elif not connector < timeout < retry:
        errors.append(
            Error(
                f"Timeouts are not ordered: connector {connector}s < cluster timeout {timeout}s "
                f"< retry {retry}s must hold.",
                hint="Lower CONNECTOR_TIMEOUT_SECONDS or raise Q_TIMEOUT / Q_RETRY.",
                id="handover.E002",
            )
        )
    budget = getattr(settings, "READ_BUDGET_SECONDS", None)
    if timeout is not None and budget is not None and budget >= timeout:
        # A read cut by its budget is told as "too slow to read"; one the cluster kills first
        # is told as nothing at all, and taken up again.
        errors.append(
            Error(
                f"READ_BUDGET_SECONDS ({budget}s) must be below the cluster timeout ({timeout}s).",
                hint="Lower READ_BUDGET_SECONDS or raise Q_TIMEOUT.",
                id="handover.E003",
            )
        )
    return errors


@register()
def reads_leave_a_worker(app_configs, **kwargs):
    """Reads' share of the workers (ledger.reads) leaves writes and messages at least one."""
    workers = int(settings.Q_CLUSTER.get("workers") or 1)
    reads = int(getattr(settings, "READS_MAX_IN_FLIGHT", 1))
    if workers > 1 and reads >= workers:
        return [
            Warning(
                f"READS_MAX_IN_FLIGHT={reads} lets reads take every one of a cluster's {workers} "
                "workers: a slow document store can hold back every write and message.",
                hint=f"Set READS_MAX_IN_FLIGHT to at most {workers - 1} (or unset it).",
                id="handover.W003",
            )
        ]
    return []


@register()
def resident_uploads_fit_the_server(app_configs, **kwargs):
    """A resident's answer (ledger.residentpage) must fit inside the web server's bound on a
    request (config.serve's WEB_MAX_BODY_BYTES), or the resident meets the server's bare 413
    instead of the page's words."""
    try:
        server = int(os.environ.get("WEB_MAX_BODY_BYTES") or 1024 * 1024)
    except ValueError:
        return []  # config.serve refuses the value itself, naming it
    most = settings.RESIDENT_UPLOAD_MAX_FILES * settings.RESIDENT_UPLOAD_MAX_BYTES + 256 * 1024
    if most > server:
        return [
            Warning(
                f"A resident's answer may carry {most:,} bytes (RESIDENT_UPLOAD_MAX_FILES x "
                f"RESIDENT_UPLOAD_MAX_BYTES, and its text), more than the web server accepts "
                f"(WEB_MAX_BODY_BYTES={server:,}): a resident would get the server's bare 413.",
                hint="Lower the resident's limits, or raise WEB_MAX_BODY_BYTES with them.",
                id="handover.W004",
            )
        ]
    return []


# The secret .env.example publishes for the demo (docs/intake.md signs with it): anyone can sign
# an enquiry with it, so a production install must never accept it.
DEMO_INTAKE_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@register(deploy=True)
def intake_secret_is_private(app_configs, **kwargs):
    secrets = settings.INTAKE_SECRETS if isinstance(settings.INTAKE_SECRETS, dict) else {}
    found = []
    if not any(isinstance(v, list) and v for v in secrets.values()):
        found.append(
            Warning(
                "No intake secret is set: every signed enquiry will be refused (401).",
                hint='Set INTAKE_SECRETS={"<source>": ["whsec_<base64 of 24+ random bytes>"]}.',
                id="handover.W201",
            )
        )
    demo = [s for s, values in secrets.items() if DEMO_INTAKE_SECRET in (values or [])]
    if demo:
        found.append(
            Error(
                f"INTAKE_SECRETS[{demo[0]!r}] is the demo secret published in .env.example: "
                "anyone can sign an enquiry with it.",
                hint="Make a new secret (python -c \"import base64,os; print('whsec_' + "
                'base64.b64encode(os.urandom(24)).decode())") and give it to the sender.',
                id="handover.E201",
            )
        )
    return found


@register(deploy=True)
def no_test_equipment(app_configs, **kwargs):
    """Production installs neither the sandbox nor the harness (config/settings.py)."""
    installed = [app for app in ("sandbox", "harness") if app in settings.INSTALLED_APPS]
    if not installed:
        return []
    return [
        Warning(
            f"Test equipment is installed ({', '.join(installed)}): `manage.py runall`, "
            "`drill` and `runsandbox` exist on this node.",
            hint="Set HANDOVER_DEV_TOOLS=0 (and DEBUG=0) in production.",
            id="handover.W202",
        )
    ]
