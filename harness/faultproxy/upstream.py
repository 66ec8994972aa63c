"""The fault proxy's upstream side: one request on a fresh connection, and the headers that
stop at this hop (relay.py forwards through it)."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from urllib.parse import urlsplit

# RFC 9110 section 7.6.1, plus the non-standard ones clients still send.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


class NotSent(Exception):
    """The upstream could not be reached: it cannot have acted on the request."""


class LostAfterSending(Exception):
    """The request went to the upstream, which then gave no answer: it may have acted."""


@dataclass
class Answer:
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True)
class Upstream:
    scheme: str
    host: str
    port: int | None
    base_path: str
    url: str

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"upstream {url!r} must be an http:// or https:// URL with a host")
        if parts.query or parts.fragment:
            raise ValueError(f"upstream {url!r} must not carry a query or a fragment")
        return cls(
            parts.scheme, parts.hostname, parts.port, parts.path.rstrip("/"), url.rstrip("/")
        )

    def send(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes | None, timeout
    ) -> Answer:
        """One request on a fresh connection: a reused one could have been closed by the
        upstream in between, and that failure would look like a lost answer."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        connection = cls(self.host, self.port, timeout=timeout)
        try:
            try:
                connection.connect()
            except OSError as exc:
                raise NotSent(f"cannot connect to {self.url}: {exc}") from exc
            try:
                connection.putrequest(method, self.base_path + target, skip_accept_encoding=True)
                for name, value in headers:
                    connection.putheader(name, value)
                connection.endheaders(body)
                response = connection.getresponse()
                answer = Answer(
                    response.status, response.reason, response.getheaders(), response.read()
                )
            except (OSError, http.client.HTTPException) as exc:
                raise LostAfterSending(f"{type(exc).__name__}: {exc}") from exc
        finally:
            connection.close()
        return answer


def connection_tokens(values: list[str]) -> set[str]:
    """Header names a Connection header lists: hop-by-hop for this one hop only."""
    return {token.strip().lower() for value in values for token in value.split(",")}
