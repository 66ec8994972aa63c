"""Standard Webhooks verification for the intake endpoint, through the `standardwebhooks` package.

The package's ``Webhook.verify`` checks the timestamp against its own clock with a fixed
five-minute window. We need the window from settings and a clock a test can set (the reference
vector is from 2021), so we do not call it: the timestamp is checked here against ``now`` and the
tolerance (``_timestamp_problem``), and the expected signature comes from the package's public
``Webhook.sign`` (secret decoding, the signed content, the HMAC), compared in constant time with
each v1 entry of the header. Nothing here uses the package's private methods or attributes, so
an upgrade cannot change the window behind our back. ``sign`` of a body that is not UTF-8 (the
package signs text only) takes the HMAC key from the secret as the specification defines it
(``secret_key``); tests/foundation/test_library_pins.py checks it is the package's key.
"""

import base64
import binascii
import hmac
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
    hmac_data,
)

logger = logging.getLogger("intake.signing")

HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
# The spec sends whole seconds; a float, an exponent or a sign is not a timestamp we accept.
_TIMESTAMP = re.compile(r"\A[0-9]{1,12}\Z")
# What the package (or the codecs under it) raise on malformed input; none of it may become a 5xx.
MALFORMED = (
    WebhookVerificationError,
    EmptyWebhookSecretError,  # a configured secret that decodes to nothing
    RuntimeError,  # the package's "Invalid webhook secret"
    ValueError,  # includes binascii.Error, UnicodeDecodeError, json.JSONDecodeError
    binascii.Error,
    TypeError,
    UnicodeError,
    IndexError,
    KeyError,
    AttributeError,
    OverflowError,
    OSError,  # datetime.fromtimestamp on some platforms
)


class SignatureRefused(Exception):
    """The delivery is not authentic (or not verifiable); the endpoint answers 401.

    Its text is what the sender is told, in the sender's terms: which header is missing or
    malformed, a timestamp outside the tolerance, or no matching signature. The library's own
    exception text (an internal detail) goes to the ``intake.signing`` log, never to the sender.
    """


MALFORMED_SIGNATURE = (
    "the webhook-signature header is malformed; send space-separated "
    '"v1,<base64 signature>" entries'
)
NO_MATCH = "no signature matches this body with a secret of this source"


def _signature_problem(header: str) -> str:
    """What is wrong with the header's shape, or "" (read as the package reads it)."""
    versions = []
    for entry in header.split(" "):
        # The package unpacks each space-separated entry into exactly two comma-separated parts
        # and base64-decodes the v1 ones; anything else would raise out of it mid-loop.
        parts = entry.split(",")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            return MALFORMED_SIGNATURE
        version, signature = parts
        if version == "v1":
            try:
                base64.b64decode(signature, validate=True)
            except (binascii.Error, ValueError):
                return MALFORMED_SIGNATURE
        versions.append(version)
    if "v1" not in versions:
        return "the webhook-signature header has no v1 signature"
    return ""


def _timestamp_problem(header: str, *, now: datetime, tolerance: timedelta) -> str:
    if not _TIMESTAMP.match(header):
        return "webhook-timestamp must be whole seconds since the Unix epoch"
    seconds = int(tolerance.total_seconds())
    try:
        timestamp = datetime.fromtimestamp(int(header), tz=UTC)
    except (OverflowError, ValueError, OSError):  # twelve digits reach past the year 9999
        timestamp = datetime.max.replace(tzinfo=UTC)
    if timestamp < now - tolerance:
        when = "too old"
    elif timestamp > now + tolerance:
        when = "in the future"
    else:
        return ""
    return (
        f"webhook-timestamp is {when} (outside the {seconds}-second tolerance); "
        "check the sender's clock"
    )


def _verify_signature(secret: str, headers: Mapping[str, str], body: bytes) -> None:
    """Return quietly when a v1 entry of the (already well-formed) signature header is
    ``secret``'s; raise as the package's ``verify`` does when none is (and, as it does, on a
    broken secret or a body that is not UTF-8, since the package signs text).
    """
    timestamp = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=UTC)
    expected = Webhook(secret).sign(
        msg_id=headers["webhook-id"], timestamp=timestamp, data=body.decode()
    )
    expected_mac = base64.b64decode(expected.split(",", 1)[1])
    matched = False
    for entry in headers["webhook-signature"].split(" "):
        version, signature = entry.split(",")
        if version == "v1":
            # Constant time, as the package compares; any one matching entry will do.
            matched |= hmac.compare_digest(expected_mac, base64.b64decode(signature))
    if not matched:
        raise WebhookVerificationError("No matching signature found")


def verify(
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime,
    tolerance_seconds: int,
) -> None:
    """Return quietly when any one of ``secrets`` signed this delivery; raise SignatureRefused."""
    lowered = {str(k).lower(): v for k, v in headers.items()}
    present = {name: lowered.get(name) for name in HEADERS}
    missing = [name for name, value in present.items() if not value]
    if missing:
        raise _refused(f"missing header{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    if not all(isinstance(value, str) for value in present.values()):
        raise _refused(MALFORMED_SIGNATURE)
    tolerance = timedelta(seconds=tolerance_seconds)
    # The headers' shape and the timestamp's window are judged here, before any signature is
    # computed, so the sender is told which header is wrong.
    problem = _timestamp_problem(
        present["webhook-timestamp"], now=now, tolerance=tolerance
    ) or _signature_problem(present["webhook-signature"])
    if problem:
        raise _refused(problem)
    if not secrets:
        raise _refused("this source has no usable secret; tell the receiving operator")
    details = []
    for secret in secrets:
        try:
            _verify_signature(secret, present, body)
            return
        except MALFORMED as exc:
            # A wrong secret and a broken one raise alike; try the next secret. A broken one is
            # the operator's to fix (manage.py check names it), so its detail goes to the log.
            details.append(f"{exc.__class__.__name__}: {exc}"[:200])
    raise _refused(NO_MATCH, details)


def _refused(reason: str, details=()) -> SignatureRefused:
    logger.info("signature refused: %s%s", reason, f" ({'; '.join(details)})" if details else "")
    return SignatureRefused(reason)


SECRET_PREFIX = "whsec_"


def secret_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret: the base64 after the ``whsec_`` prefix (the
    specification's format; decoded as the package decodes it, missing padding allowed). The
    package keeps its decoded key private and has no accessor for it."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX) + "==")


def sign_bytes(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The specification's signature over ``body`` as bytes, whatever they are."""
    mac = hmac_data(secret_key(secret), f"{msg_id}.{timestamp}.".encode() + body)
    return f"v1,{base64.b64encode(mac).decode()}"


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value for one secret (for senders, docs and tests)."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        # The package signs text; the spec signs bytes. Tests need bodies that are not UTF-8.
        return sign_bytes(secret, msg_id, timestamp, body)
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    return Webhook(secret).sign(msg_id=msg_id, timestamp=when, data=text)
