"""Standard Webhooks verification for the intake endpoint, through the `standardwebhooks` package.

The package checks the timestamp against its own clock with a fixed five-minute window. We need
the window from settings and a clock a test can set (the reference vector is from 2021), so a
subclass supplies the timestamp check; everything else (header parsing, the HMAC, the constant
time comparison, several signatures in one header) is the package's own code.
"""

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from standardwebhooks.webhooks import (
    EmptyWebhookSecretError,
    Webhook,
    WebhookVerificationError,
    hmac_data,
)

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
    """The delivery is not authentic (or not verifiable); the endpoint answers 401."""


class _Verifier(Webhook):
    def __init__(self, secret: str, *, now: datetime, tolerance: timedelta):
        super().__init__(secret)
        self._now = now
        self._tolerance = tolerance

    # Overrides Webhook.__verify_timestamp (name-mangled); standardwebhooks==1.1.0 is pinned and
    # tests/intake/test_signing.py runs the reference vector through this path.
    def _Webhook__verify_timestamp(self, timestamp_header: str) -> datetime:
        if not isinstance(timestamp_header, str) or not _TIMESTAMP.match(timestamp_header):
            raise WebhookVerificationError("Invalid Signature Headers")
        timestamp = datetime.fromtimestamp(int(timestamp_header), tz=UTC)
        if timestamp < self._now - self._tolerance:
            raise WebhookVerificationError("Message timestamp too old")
        if timestamp > self._now + self._tolerance:
            raise WebhookVerificationError("Message timestamp too new")
        return timestamp


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
        raise SignatureRefused(f"missing header(s): {', '.join(missing)}")
    if not secrets:
        raise SignatureRefused("no secret configured for this source")
    tolerance = timedelta(seconds=tolerance_seconds)
    last = "no matching signature"
    for secret in secrets:
        try:
            _Verifier(secret, now=now, tolerance=tolerance).verify(body, present, json_parse=False)
            return
        except MALFORMED as exc:
            # A wrong secret and a malformed header raise the same way; try the next secret.
            last = f"{exc.__class__.__name__}: {exc}"[:200]
    raise SignatureRefused(last)


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value for one secret (for senders, docs and tests)."""
    webhook = Webhook(secret)
    try:
        text = body.decode()
    except UnicodeDecodeError:
        # The package signs text; the spec signs bytes. Tests need bodies that are not UTF-8.
        mac = hmac_data(webhook._whsecret, f"{msg_id}.{timestamp}.".encode() + body)
        return f"v1,{base64.b64encode(mac).decode()}"
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    return webhook.sign(msg_id=msg_id, timestamp=when, data=text)
