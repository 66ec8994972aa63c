"""The one rule for a destination's address (an integration's base URL), wherever it is typed:
the environment (``CRM_BASE_URL`` and the others, read by config.settings), the console's
integration form, the Django admin and the model itself (ledger.Integration.base_url).

An address is http or https (or, for an e-mail relay, smtp, smtp+starttls or smtps, which may
name the relay's user but never its password), names a host, has no port or a port from 1 to
65535, and carries no credentials, query or fragment. Which scheme fits an integration is its
kind's to say (ledger.kinds.Kind.validate). Credentials in an address would be sent to
whatever host it names and shown wherever the address is shown (the journal, the page): the
integration's token is the one place for a secret. An internal host is allowed: a CRM often
lives on the same network (docs/integrations.md, "Addresses").
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit, urlunsplit

from django.core.exceptions import ValidationError

# Said to whoever typed the address (a form field, an admin page, a start-up error).
EMPTY = "Enter the destination's address, such as https://crm.example.org."
SPACES = "The address contains spaces or control characters."
SCHEME = (
    "The address must start with http:// or https:// (an e-mail relay: smtp://, "
    "smtp+starttls:// or smtps://)."
)
CREDENTIALS = (
    "The address must not contain a user name or password (user:password@): put the "
    "credential in the integration's token instead."
)
QUERY = "The address must not have a query (?) or a fragment (#): give the API's root."
HTTP_ONLY = "The address must start with http:// or https://."
NO_HOST = "The address names no host."
HOST = "The address's host is not a valid host name or IP address."
PORT = "The address's port must be a whole number from 1 to 65535."
TOO_LONG = "The address is longer than 200 characters."

MAX_LENGTH = 200
HTTP_SCHEMES = ("http", "https")
# An e-mail relay's address may name its user (smtp+starttls://handover@relay:587); its password
# is the integration's token, as for every other kind.
MAIL_SCHEMES = ("smtp", "smtp+starttls", "smtps")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")


def address_problem(url, schemes=HTTP_SCHEMES + MAIL_SCHEMES) -> str | None:
    """What is wrong with ``url`` as a destination's address, in words; None when it is fine.
    ``schemes``: those allowed here (the environment's <P>_BASE_URL variables: HTTP only)."""
    if not isinstance(url, str) or not url.strip():
        return EMPTY
    if len(url) > MAX_LENGTH:
        return TOO_LONG
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return SPACES
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed "[" of an IPv6 address
        return HOST
    scheme = parts.scheme.lower()
    if scheme not in schemes or not url.lower().startswith(scheme + "://"):
        return SCHEME if set(schemes) & set(MAIL_SCHEMES) else HTTP_ONLY
    userinfo, at, _rest = parts.netloc.rpartition("@")
    if at and (
        scheme not in MAIL_SCHEMES or not userinfo or ":" in userinfo or "%3a" in userinfo.lower()
    ):
        return CREDENTIALS
    if parts.query or parts.fragment or "?" in url or "#" in url:
        return QUERY
    host, port = _host_and_port(parts.netloc.rpartition("@")[2])
    if not host:
        return NO_HOST
    if port is not None and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return PORT
    if not _valid_host(host):
        return HOST
    return None


def _host_and_port(netloc: str) -> tuple[str, str | None]:
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        return f"[{host}]" if host else "", (rest[1:] if rest.startswith(":") else None)
    host, colon, port = netloc.rpartition(":")
    return (host, port) if colon else (netloc, None)


def _valid_host(host: str) -> bool:
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
        return True
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    labels = ascii_host.rstrip(".").split(".")
    return len(ascii_host) <= 253 and all(_LABEL.match(label) for label in labels)


def validate_address(url) -> None:
    """The rule as a Django validator (the model field, the console form, the admin)."""
    problem = address_problem(url)
    if problem:
        raise ValidationError(problem, code="invalid_address")


def shown(url: str) -> str:
    """``url`` as it may be shown or journalled: without any user name or password (an address
    stored before the rule existed may hold them)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an address that cannot be read)"
    userinfo = parts.netloc.rpartition("@")[0]
    if "@" not in parts.netloc or (
        parts.scheme.lower() in MAIL_SCHEMES and userinfo and ":" not in userinfo
    ):
        return url  # no credentials, or only a relay's user name (no secret)
    return urlunsplit(
        parts._replace(netloc="(credentials removed)@" + parts.netloc.rpartition("@")[2])
    )
