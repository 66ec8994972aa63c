"""The one HTTP wrapper every connector uses: a requests.Session, a required timeout, and every
failure turned into a ConnectorError whose kind says what is known about the destination.

The distinction that matters is between *never sent* and *sent, no answer*:

- transient: the request cannot have been acted on (connection refused, DNS, connect timeout,
  502/503/504, 429). Retrying with backoff is safe. A 429, and a 503 with ``Retry-After``, is
  the destination asking us to slow down: the error carries ``retry_after`` (ledger.limits).
- uncertain: the request may have been acted on (read timeout, connection reset or closed
  after the request was written). Retrying blindly could duplicate a write: reconcile first.
- invalid: the destination refused the request as it is (400/404/409/422, other 4xx).
- auth: the destination refused our credentials (401/403).

Tests patch ``ledger.http.send`` (and nothing else) in unit tests.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import requests
from requests import exceptions as rx

from ledger import failpoints
from ledger.connectors.base import ConnectorError, ErrorKind

BODY_LIMIT = 2000
TRANSIENT_STATUSES = {429, 502, 503, 504}
INVALID_STATUSES = {400, 404, 405, 409, 410, 413, 415, 422}
AUTH_STATUSES = {401, 403}

_local = threading.local()


def _session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = requests.Session()
        session.trust_env = False  # destinations are configured, never an environment proxy
        _local.session = session
    return session


@dataclass
class HttpResult:
    status: int
    body: Any  # parsed JSON, or the text
    text: str
    headers: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        return self.text[:BODY_LIMIT]


def send(
    method: str,
    url: str,
    *,
    timeout: float,
    json_body: Any = None,
    params: dict | None = None,
    headers: dict | None = None,
) -> HttpResult:
    """One HTTP call. Returns a 2xx result or raises ConnectorError; nothing else escapes."""
    if not timeout or timeout <= 0:
        raise ValueError("every external call needs a timeout")
    # The failpoint "during_call" kills the process while the request is in flight.
    guard = failpoints.arm_during_call()
    try:
        response = _session().request(
            method, url, json=json_body, params=params, headers=headers, timeout=timeout
        )
    except rx.ConnectTimeout as exc:
        raise ConnectorError(ErrorKind.TRANSIENT, f"connect timeout: {exc}") from exc
    except rx.ReadTimeout as exc:
        raise ConnectorError(ErrorKind.UNCERTAIN, f"no answer within {timeout}s") from exc
    except rx.ConnectionError as exc:
        raise _classify_connection_error(exc) from exc
    except rx.RequestException as exc:
        # Invalid URL, too many redirects, a body that cannot be encoded: nothing was sent.
        raise ConnectorError(ErrorKind.INVALID, f"request not sent: {exc}") from exc
    finally:
        if guard is not None:
            guard.cancel()
    text = response.text
    try:
        body = response.json() if text else None
    except ValueError:
        body = text
    result = HttpResult(response.status_code, body, text, dict(response.headers))
    if 200 <= response.status_code < 300:
        return result
    raise status_error(result)


def status_error(result: HttpResult) -> ConnectorError:
    status = result.status
    message = _message(result)
    if status in AUTH_STATUSES:
        kind = ErrorKind.AUTH
    elif status in TRANSIENT_STATUSES:
        kind = ErrorKind.TRANSIENT
    elif status in INVALID_STATUSES or 400 <= status < 500:
        kind = ErrorKind.INVALID
    elif status == 501:
        kind = ErrorKind.INVALID  # "not implemented": asking again will not help
    else:
        # 500 and other 5xx: the server failed while handling the request, which may have
        # been acted on before it failed. Not proof of anything: reconcile.
        kind = ErrorKind.UNCERTAIN
    return ConnectorError(
        kind,
        f"{status}: {message}",
        status=status,
        body=result.summary(),
        retry_after=_retry_after(result),
    )


def _retry_after(result: HttpResult) -> float | None:
    """Seconds a 429 (or a 503 that names a time) asks us to wait; None for other answers."""
    from ledger.limits import parse_retry_after

    value = next((v for k, v in result.headers.items() if k.lower() == "retry-after"), None)
    if result.status == 429 or (result.status == 503 and value is not None):
        return parse_retry_after(value)
    return None


def _message(result: HttpResult) -> str:
    body = result.body
    if isinstance(body, dict):
        parts = [str(body[k]) for k in ("error", "detail", "message") if body.get(k)]
        if parts:
            return " - ".join(parts)
        return json.dumps(body)[:300]
    return (result.text or "").strip()[:300] or "(empty body)"


def _classify_connection_error(exc: rx.ConnectionError) -> ConnectorError:
    """Refused/unreachable means never sent; a reset or close after sending is uncertain."""
    chain = []
    seen = exc
    while seen is not None and len(chain) < 10:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__ or (seen.args[0] if seen.args else None)
        if not isinstance(seen, BaseException):
            # urllib3's MaxRetryError keeps the real cause in .reason
            reason = getattr(chain[-1], "reason", None)
            seen = reason if isinstance(reason, BaseException) else None
    names = {type(e).__name__ for e in chain}
    text = " | ".join(str(e) for e in chain)
    never_sent = {
        "ConnectionRefusedError",
        "NewConnectionError",
        "NameResolutionError",
        "gaierror",
    }
    if names & never_sent:
        return ConnectorError(ErrorKind.TRANSIENT, f"not connected: {exc}")
    if "ConnectTimeoutError" in names:
        return ConnectorError(ErrorKind.TRANSIENT, f"connect timeout: {exc}")
    if "ReadTimeoutError" in names:
        return ConnectorError(ErrorKind.UNCERTAIN, f"no answer: {exc}")
    # ProtocolError('Connection aborted.', RemoteDisconnected / ConnectionResetError): the
    # request went out on an established connection and no answer came back.
    return ConnectorError(ErrorKind.UNCERTAIN, f"connection lost after sending: {text[:300]}")
