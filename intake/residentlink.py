"""The resident's link to their enquiry, and the reply address that carries the same binding.

A link is ``CONSOLE_URL/r/<token>/``. The token is made with Django's signing (a
``TimestampSigner`` with its own salt, keyed by ``SECRET_KEY``): it names the enquiry's id and
its ``resident_secret``, and the time it was made. It cannot be guessed or altered (HMAC-SHA256),
it expires ``RESIDENT_LINK_DAYS`` after it was made, and giving an enquiry a new
``resident_secret`` revokes every link made before. The reading side tells an expired link
apart from a forged one, so the page can offer to send a new link to the address on file.

The reply address (``reply+<reference>-<mac>@RESIDENT_REPLY_DOMAIN``) is the same binding in
a form an e-mail address can hold: lower-case, short (an address's local part is at most 64
characters), and without expiry (a reply can come weeks later), revoked the same way.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core import signing
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from intake.models import Enquiry

SALT = "handover.resident-link"
REPLY_SALT = "handover.resident-reply"
# A token is a signed JSON object: never parsed before its signature is checked, and
# bounded in length before that (a real one is about 110 characters).
TOKEN_MAX = 300
REPLY_MAC_LENGTH = 20  # hex: 80 bits
_REPLY_LOCAL = re.compile(r"\Areply\+(enq-[a-z0-9]{1,20})-([0-9a-f]{20})\Z")


def link_days() -> int:
    return settings.RESIDENT_LINK_DAYS


class _Signer(signing.TimestampSigner):
    """Django's TimestampSigner, stamped at ``at`` when given (tests and callers that make a
    link for a moment of their own)."""

    def __init__(self, *, at: datetime | None = None):
        super().__init__(salt=SALT)
        self._at = at

    def timestamp(self):
        if self._at is None:
            return super().timestamp()
        return signing.b62_encode(int(self._at.timestamp()))


def token_for(enquiry: Enquiry, *, now: datetime | None = None) -> str:
    return _Signer(at=now).sign_object({"e": str(enquiry.pk), "s": enquiry.resident_secret})


def url_for(enquiry: Enquiry, *, now: datetime | None = None) -> str:
    """The resident page's absolute address for ``enquiry``, valid RESIDENT_LINK_DAYS from
    ``now``."""
    return f"{settings.CONSOLE_URL.rstrip('/')}/r/{token_for(enquiry, now=now)}/"


@dataclass(frozen=True)
class Link:
    enquiry: Enquiry
    issued_at: datetime
    expires_at: datetime

    def expired(self, now: datetime | None = None) -> bool:
        return (now or timezone.now()) >= self.expires_at


def read(token: str, *, now: datetime | None = None) -> Link | None:
    """The enquiry a token names, when made by us and not revoked, with when it expires (an
    expired link is still returned: the page says so and offers a new one). None for anything
    else, whatever ``token`` holds."""
    if not isinstance(token, str) or not token or len(token) > TOKEN_MAX or not token.isascii():
        return None
    signer = _Signer()
    try:
        stamped = signing.Signer.unsign(signer, token)  # the signature, checked once
        _value, stamp = stamped.rsplit(signer.sep, 1)
        issued = datetime.fromtimestamp(signing.b62_decode(stamp), tz=UTC)
        data = signer.unsign_object(token)
    except (signing.BadSignature, ValueError, TypeError, OverflowError, OSError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("e"), str):
        return None
    pk = _uuid(data["e"])
    enquiry = Enquiry.objects.filter(pk=pk).first() if pk else None
    if enquiry is None or not constant_time_compare(
        str(data.get("s", "")), enquiry.resident_secret
    ):
        return None
    return Link(enquiry, issued, issued + timedelta(days=link_days()))


def _uuid(text: str) -> str | None:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def _reply_mac(enquiry: Enquiry) -> str:
    value = f"{enquiry.pk}:{enquiry.resident_secret}"
    return salted_hmac(REPLY_SALT, value, algorithm="sha256").hexdigest()[:REPLY_MAC_LENGTH]


def reply_address(enquiry: Enquiry) -> str | None:
    """The Reply-To address of a message about ``enquiry``; None when RESIDENT_REPLY_DOMAIN
    is not set (replies are then threaded by Message-ID alone)."""
    domain = settings.RESIDENT_REPLY_DOMAIN
    if not domain:
        return None
    return f"reply+{enquiry.reference.lower()}-{_reply_mac(enquiry)}@{domain}"


def enquiry_for_reply_address(address: str) -> Enquiry | None:
    """The enquiry a reply address of ours names, or None (not ours, altered or revoked)."""
    local, _at, domain = str(address or "").strip().lower().rpartition("@")
    if not domain or domain != (settings.RESIDENT_REPLY_DOMAIN or "").lower():
        return None
    match = _REPLY_LOCAL.match(local)
    if not match:
        return None
    enquiry = Enquiry.objects.filter(reference=match.group(1).upper()).first()
    if enquiry is None or not constant_time_compare(match.group(2), _reply_mac(enquiry)):
        return None
    return enquiry
