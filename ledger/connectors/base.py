"""What every connector shares: the typed error (ledger.errors), the outcome of a call and of
a lookup.

A connector knows one destination's API: how to send an approved operation, how to look its
record up, and how to tell the difference between "not there" and "cannot tell". It never
touches the ledger's state: ledger.execution decides what an outcome means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger import http, limits, storable
from ledger.errors import ConnectorError, ErrorKind


@dataclass
class CallResult:
    """A call the destination answered with success."""

    status: int | None = None
    external_id: str = ""
    body: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    # What a read found (a document's fields and text): handed to ledger.effects, never kept
    # on the operation, whose record outlives personal data.
    content: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.external_id = storable.text(self.external_id)
        self.body = storable.text(self.body)
        self.result = storable.data(self.result)


@dataclass
class LookupResult:
    """What the destination knows about an operation's reference.

    ``supported`` False: this destination cannot be asked (a person must look).
    ``repeatable`` True: a read, safe to simply do again (nothing to look up).
    ``found``: the records carrying the reference, with their external IDs.
    ``failed``: found, but in a state that says the action did not take effect (for example a
    message the provider reports as failed to deliver).
    """

    supported: bool = True
    repeatable: bool = False
    found: list[dict[str, Any]] = field(default_factory=list)
    failed: str = ""
    status: int | None = None
    body: str = ""

    def __post_init__(self):
        self.found = storable.data(self.found)
        self.failed = storable.text(self.failed)
        self.body = storable.text(self.body)

    @property
    def external_ids(self) -> list[str]:
        return [str(item.get("id", "")) for item in self.found]


class Connector:
    """Base class: one subclass per action and destination API, registered by a kind
    (ledger.kinds)."""

    def __init__(self, integration=None):
        self.integration = integration

    # -- helpers ---------------------------------------------------------------------------
    @property
    def timeout(self) -> float:
        from django.conf import settings

        if self.integration is None:
            return settings.CONNECTOR_TIMEOUT_SECONDS
        return self.integration.timeout_seconds

    def url(self, path: str) -> str:
        """``path`` comes from ledger.http.path, which encodes every segment."""
        return self.integration.base_url.rstrip("/") + path

    def same_server(self, url: str) -> str:
        """``url`` if it is on the integration's server (scheme, host and port); otherwise an
        invalid attempt, never sent: a destination's answer cannot send our credentials on."""
        from urllib.parse import urlsplit

        def origin(address):
            parts = urlsplit(address)
            return (parts.scheme.lower(), parts.hostname, parts.port)

        if origin(url) != origin(self.integration.base_url):
            raise ConnectorError(
                ErrorKind.INVALID,
                f"request not sent: {url[:200]} is not on the integration's server",
            )
        return url

    @staticmethod
    def summary_path(*segments) -> str:
        """The path for an attempt's summary (recorded before the call): never raises, because
        the call itself refuses a path it cannot build, as an invalid attempt."""
        try:
            return http.path(*segments)
        except ConnectorError as exc:
            return f"({exc.message})"

    def headers(self, operation=None, *, idempotent=False) -> dict[str, str]:
        headers = {"Accept": "application/json", "X-Handover-Operation": ""}
        if operation is not None:
            headers["X-Handover-Operation"] = str(operation.pk)
            if idempotent:
                headers["Idempotency-Key"] = operation.idempotency_key
        if self.integration is not None and self.integration.token:
            headers["Authorization"] = f"Bearer {self.integration.token}"
        return headers

    def request(
        self, method, path="", *, operation=None, idempotent=False, url=None, headers=None, **kwargs
    ):
        """``path`` under the integration's address; or ``url``, a whole address a destination
        named (a WebDAV href), sent only when it is on the integration's own server.
        ``headers`` add to (or replace) the connector's own."""
        target = self.same_server(url) if url is not None else self.url(path)

        # The one choke point: every request to a limited destination takes its turn here.
        try:
            permit = limits.before_request(self.integration)
        except limits.Throttled as exc:
            raise ConnectorError(
                ErrorKind.TRANSIENT,
                f"not sent: {exc.not_yet.why}",
                retry_after=limits.seconds_until(exc.not_yet.at),
            ) from exc
        try:
            return http.send(
                method,
                target,
                timeout=self.timeout,
                headers={**self.headers(operation, idempotent=idempotent), **(headers or {})},
                **kwargs,
            )
        finally:
            limits.after_request(permit)

    def post_write(self, path, operation, *, what="record"):
        """POST the approved payload (with the idempotency key where the destination honours
        it); returns (response, body, external_id). A 2xx without an ID proves nothing, so it
        is treated as no answer: uncertain."""
        response = self.request(
            "POST",
            path,
            operation=operation,
            idempotent=self.integration.capabilities.idempotency_key,
            json_body=operation.payload,
        )
        body = response.body if isinstance(response.body, dict) else {}
        external_id = str(body.get("id") or "")
        if not external_id:
            raise ConnectorError(
                "uncertain",
                f"{response.status} without a {what} id",
                status=response.status,
                body=response.summary(),
            )
        return response, body, external_id

    @staticmethod
    def needs(operation, key):
        """The payload's ``key``: an operation proposed without it is Handover's own mistake,
        said as one (internal, nothing sent), never a bare KeyError."""
        payload = operation.payload if isinstance(operation.payload, dict) else {}
        value = payload.get(key)
        if value is None or value == "":
            raise ConnectorError(
                ErrorKind.INTERNAL,
                f"the {operation.action} operation was proposed without {key!r} in its payload, "
                "so there is nothing to send it with; nothing was sent",
            )
        return value

    # -- the interface -----------------------------------------------------------------------
    def request_summary(self, operation) -> dict[str, Any]:
        """What the attempt row records before the call (no personal data beyond the key)."""
        return {"action": operation.action, "idempotency_key": operation.idempotency_key}

    def call(self, operation) -> CallResult:
        raise NotImplementedError

    def lookup(self, operation) -> LookupResult:
        """Default for reads: nothing to look up, repeating is safe."""
        return LookupResult(repeatable=True)

    def record_url(self, external_id: str) -> str | None:
        """Where a person can open a record the destination holds, or None (it has no such
        address): the console links the records it names."""
        return None
