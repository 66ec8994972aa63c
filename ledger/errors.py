"""The typed error every destination call raises: what kind of outcome, and what was said.

The bottom of the destinations layer (ledger.http, ledger.smtp, the connectors and the kinds
import it; it imports nothing of theirs), so the wrapper and the connectors need no deferred
import of each other.
"""

from __future__ import annotations

import enum

from ledger import storable


class ErrorKind(enum.StrEnum):
    TRANSIENT = "transient"  # never sent or refused before being acted on: retry with backoff
    UNCERTAIN = "uncertain"  # sent, no answer: the destination may have acted; reconcile
    INVALID = "invalid"  # refused as it is: do not retry, a person reads the message
    AUTH = "auth"  # our credentials were refused: do not retry, the owner is told
    # An error inside Handover's own code before anything was sent: not the destination's
    # outcome. Not retried by itself; a person (the maintainer) looks, then retries safely.
    INTERNAL = "internal"


class ConnectorError(Exception):
    """``attention``: for an uncertain outcome that no look-up can settle, why a person must
    look instead (an ``ATTENTION`` code); ``evidence``: what the destination did say (an ID it
    returned), kept on the operation for that person.

    What a destination said (message, body, evidence) is made storable here, once, for every
    connector (ledger.storable: a NUL or a lone surrogate would stop PostgreSQL storing it)."""

    def __init__(
        self,
        kind,
        message: str,
        *,
        status: int | None = None,
        body: str = "",
        attention: str = "",
        evidence: dict | None = None,
        retry_after: float | None = None,
        answer: str = "",
        unread: str = "",
    ):
        message = storable.text(message)
        super().__init__(message)
        self.kind = ErrorKind(kind)
        self.message = message
        self.status = status
        self.body = storable.text(body)
        self.attention = attention
        self.evidence = storable.data(evidence or {})
        # Seconds the destination asked us to wait (429, or 503 with Retry-After): a throttle,
        # not a failure. The engine waits it out without spending the retry budget.
        self.retry_after = retry_after
        # What came back, without its content ("HTTP 404, text/html, 1,234 characters"): what
        # an admin's connection check shows, so it cannot read another service's pages.
        self.answer = answer
        # Why the answer was not read in full, in plain words (a bound of ledger.reading: "the
        # answer was larger than 2 MB after decompression ..."); "" when it was read.
        self.unread = storable.text(unread)

    @property
    def retryable(self) -> bool:
        return self.kind is ErrorKind.TRANSIENT

    def __repr__(self):
        return f"ConnectorError({self.kind.value}, {self.message!r}, status={self.status})"
