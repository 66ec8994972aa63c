"""Signed events from a provider, checked in one order: the signature first, then the moment it
was signed (within ``DELIVERY_WEBHOOK_WINDOW_SECONDS`` of now, either side), then its event id,
taken once.

Mailgun signs a webhook with HMAC-SHA256 of ``timestamp + token`` under the domain's webhook
signing key; the token is random per event. Only those three values are signed, so nothing else
in the request is read before they check out, and a captured request is worth nothing once its
window has passed or its token was taken. A tracking webhook carries them in its JSON
``signature`` block (ledger.webhooks); an inbound route carries them as form fields: both call
``mailgun_signature`` and then ``take_once`` inside the transaction that acts on the event.

Every refusal is ``Refused``, whose words are safe to answer: they never echo the input or a
secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.models import ProviderEvent

# Whole seconds since 1970 in ASCII digits (str.isdigit also takes "²" and "٣", which int()
# reads differently or not at all); 11 digits reach the year 5138, inside datetime's range.
_TIMESTAMP = re.compile(r"\A[0-9]{1,11}\Z")
# A token as stored: printable ASCII, bounded (Mailgun's are 50 characters).
_TOKEN = re.compile(r"\A[\x21-\x7e]{1,200}\Z")
# Bounds before anything is hashed: far above anything Mailgun sends.
_LONGEST = 512


class Refused(Exception):
    """A signed request refused, with a reason the sender may read."""


def window() -> timedelta:
    return timedelta(seconds=settings.DELIVERY_WEBHOOK_WINDOW_SECONDS)


def mailgun_signature(timestamp, token, signature, *, key: str, now=None) -> datetime:
    """The moment a Mailgun event was signed, once its signature is right and that moment is
    within ``window()`` of now. Raises Refused, checking in this order: the three values are
    text (a JSON whole number for the timestamp too), the signature matches, the timestamp is
    whole seconds, the token is printable, the moment is within the window."""
    if isinstance(timestamp, int) and not isinstance(timestamp, bool):
        timestamp = str(timestamp)
    if not all(isinstance(value, str) for value in (timestamp, token, signature)):
        raise Refused("The signature's timestamp, token and signature must be text.")
    if max(len(timestamp), len(token), len(signature)) > _LONGEST:
        raise Refused("The signature does not match.")
    signed = f"{timestamp}{token}".encode("utf-8", "surrogatepass")
    expected = hmac.new(key.encode("utf-8"), signed, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(signature.encode("utf-8", "surrogatepass"), expected):
        raise Refused("The signature does not match.")
    # Signed by the key's holder: only now is what it signed read.
    if not _TIMESTAMP.match(timestamp):
        raise Refused("The signature's timestamp is not a whole number of seconds.")
    if not _TOKEN.match(token):
        raise Refused("The signature's token is not printable text of at most 200 characters.")
    signed_at = datetime.fromtimestamp(int(timestamp), tz=UTC)
    now = now or timezone.now()
    if abs(now - signed_at) > window():
        raise Refused(
            f"The event was signed {int(abs((now - signed_at).total_seconds()))} s "
            f"{'ago' if signed_at < now else 'ahead of our clock'}; events are taken only "
            f"within {settings.DELIVERY_WEBHOOK_WINDOW_SECONDS} s of when they were signed."
        )
    return signed_at


def take_once(provider: str, event_id: str, signed_at: datetime) -> bool:
    """Record that ``provider``'s event ``event_id`` is being acted on: True the first time,
    False when it was taken before (a replay, or the provider's retry of one already acted
    on). Call it inside the transaction that acts on the event, so that if acting fails the
    record goes too and the provider's retry is taken. Rows signed more than two windows ago
    are pruned here (their events are refused by their timestamp before this is reached)."""
    ProviderEvent.objects.filter(signed_at__lt=timezone.now() - 2 * window()).delete()
    with transaction.atomic():  # a savepoint: a concurrent twin's insert fails here, not outside
        _row, created = ProviderEvent.objects.get_or_create(
            provider=provider, event_id=event_id, defaults={"signed_at": signed_at}
        )
    return created
