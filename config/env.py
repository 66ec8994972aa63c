"""Settings helpers that read the environment and fail loudly on a bad value.

A typo in a production variable should stop the process at start-up, not surface as a strange
behaviour at three in the morning.
"""

import json
import math
import os
import re

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name, default=None):
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise ImproperlyConfigured(f"{name} must be set")
        return default
    return value


def env_bool(name, default=False):
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false)")


def env_int(name, default, *, minimum=None):
    value = os.environ.get(name)
    if value is None:
        return default
    # ASCII digits only: int() also reads "٣" (3) and other scripts' digits, which no one types
    # into a setting on purpose.
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        raise ImproperlyConfigured(f"{name}={value!r} is not a whole number")
    number = int(value)
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}")
    return number


def env_float(name, default, *, minimum=None):
    value = os.environ.get(name)
    if value is None:
        return default
    # ASCII only, as env_int: float() also reads "٣.5" and "1_000", which no one types into a
    # setting on purpose.
    if not re.fullmatch(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*", value):
        raise ImproperlyConfigured(f"{name}={value!r} is not a number")
    number = float(value)
    if not math.isfinite(number):  # float() takes "nan" and "inf", which no setting means
        raise ImproperlyConfigured(f"{name}={value!r} is not a finite number")
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}")
    return number


def env_list(name, default=()):
    value = os.environ.get(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_json(name, default):
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None


def env_port(name, default):
    """A TCP port, 1 to 65535."""
    port = env_int(name, default, minimum=1)
    if port > 65535:
        raise ImproperlyConfigured(f"{name}={port} is not a port (1 to 65535)")
    return port


def env_email(name, default):
    """An address to send from, bare or with a display name: 'Council <noreply@example.org>'."""
    from email.utils import parseaddr

    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    value = env_str(name, default)
    _display, address = parseaddr(value)
    try:
        validate_email(address)
    except ValidationError:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not an e-mail address (write noreply@example.org, or "
            "Council <noreply@example.org>)"
        ) from None
    return value


def env_address(name, default):
    """An HTTP destination's address (config.destinations' rule): a bad one stops the process.
    A relay's smtp:// address comes from the EMAIL_* settings instead (ledger.integrations)."""
    from config.destinations import HTTP_SCHEMES, address_problem

    value = env_str(name, default)
    problem = address_problem(value, schemes=HTTP_SCHEMES)
    if problem:
        raise ImproperlyConfigured(f"{name}: {problem}")
    return value
