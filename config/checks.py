"""System checks for configuration that would otherwise fail quietly in production."""

from django.conf import settings
from django.core.checks import Error, register


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
    return errors
