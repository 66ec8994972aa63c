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

Redirects are never followed: a 3xx is an answer like any other (uncertain: the destination
may have acted before it pointed elsewhere), so the token sent with a request goes to the
address an admin entered and nowhere else. An address holding a user name or password is not
called at all. Whatever the destination says back passes through ``redact`` before anyone can
store, log or show it: a destination that echoes the request must not put the token into an
attempt row, the journal or a page.

Every connector builds its URL paths with ``ledger.http.path``: one place that encodes each
segment, so an identifier chosen by someone else cannot steer a request (and its credentials)
to another path of the destination.

Tests patch ``ledger.http.send`` (and nothing else) in unit tests.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, urlsplit

import requests
import requests.utils
from requests import exceptions as rx
from urllib3 import exceptions as ux

from ledger import failpoints, reading, storable
from ledger.errors import ConnectorError, ErrorKind
from ledger.limits import parse_retry_after

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
        # Connections whose socket the call's time budget can shut (ledger.reading.Watch).
        session.mount("http://", reading.Adapter())
        session.mount("https://", reading.Adapter())
        _local.session = session
    return session


def requests_started() -> int:
    """How many requests this thread has handed to the network so far: the engine compares
    it around a connector's call to tell an error inside Handover before anything was sent
    (internal) from one after a request went out (uncertain)."""
    return getattr(_local, "started", 0)


def path(*segments: str | int) -> str:
    """The URL path made of ``segments``, each percent-encoded whole: ``path("docs", "a/b")``
    is ``"/docs/a%2Fb"``.

    Nothing in a segment can add a segment, a query or a fragment: "/", "?", "#" and "%" are
    encoded (so "..%2F" arrives as the text "..%2F", not as a slash). A segment that is empty,
    "." or ".." is refused outright: percent-encoding leaves dots alone, and urllib3 resolves
    dot segments away, so "/docs/.." would be sent as "/". Raises ConnectorError (invalid,
    never sent).
    """
    parts = []
    for segment in segments:
        text = str(segment)
        if text in ("", ".", ".."):
            raise ConnectorError(
                ErrorKind.INVALID, f"request not sent: {text!r} cannot be a segment of a URL path"
            )
        try:
            parts.append(quote(text, safe=""))
        except UnicodeEncodeError as exc:  # a lone surrogate cannot be written as UTF-8
            raise ConnectorError(
                ErrorKind.INVALID, f"request not sent: {text!r} is not valid text for a URL"
            ) from exc
    return "/" + "/".join(parts)


@dataclass
class HttpResult:
    status: int
    body: Any  # parsed JSON, or the text
    text: str
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = field(default=b"", repr=False)  # the body as sent (an XML multistatus, a
    # document's bytes); ``text`` decodes it

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    def summary(self) -> str:
        return self.text[:BODY_LIMIT]

    def answer(self) -> str:
        """What came back, without its content: "HTTP 404, text/html, 1,234 characters"."""
        content_type = next((v for k, v in self.headers.items() if k.lower() == "content-type"), "")
        content_type = content_type.split(";", 1)[0].strip()[:60] or "no content type"
        return f"HTTP {self.status}, {content_type}, {len(self.text):,} characters"


REDACTED = "[redacted]"


def secrets_sent(headers: dict | None) -> list[str]:
    """The secret values in ``headers`` as sent: the Authorization value and its credential."""
    found = []
    for name, value in (headers or {}).items():
        if name.lower() in ("authorization", "proxy-authorization") and value:
            found.append(str(value))
            _scheme, _, credential = str(value).partition(" ")
            if credential.strip():
                found.append(credential.strip())
    return found


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret, as sent, URL-encoded or JSON-escaped, replaced."""
    if not text or not secrets:
        return text
    forms = set()
    for secret in secrets:
        forms.update({secret, quote(secret, safe=""), json.dumps(secret)[1:-1]})
    for form in sorted((f for f in forms if f), key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text


def _redacted_error(exc: ConnectorError, secrets: list[str]) -> ConnectorError:
    exc.message = redact(exc.message, secrets)
    exc.args = (exc.message,)
    exc.body = redact(exc.body, secrets)
    return exc


def send(
    method: str,
    url: str,
    *,
    timeout: float,
    json_body: Any = None,
    params: dict | None = None,
    headers: dict | None = None,
    data: bytes | str | None = None,
    max_bytes: int | None = None,
) -> HttpResult:
    """One HTTP call. Returns a 2xx result or raises ConnectorError; nothing else escapes.
    ``data``: a body sent as it is (a WebDAV/CalDAV XML query), instead of ``json_body``.
    ``max_bytes``: the most the answer may hold once decompressed (default READ_MAX_BYTES; a
    document's read passes DOCUMENT_MAX_BYTES). The answer is read within the bounds of
    ledger.reading: size, decompression ratio, one time budget, JSON nesting.

    Every text in the result or the error has had the secrets sent with the call redacted (the
    raw ``content`` bytes, which a DAV kind parses and never stores, are left as sent)."""
    if not timeout or timeout <= 0:
        raise ValueError("every external call needs a timeout")
    secrets = secrets_sent(headers)
    try:
        result = _send(method, url, timeout, json_body, params, headers, data, max_bytes)
    except ConnectorError as exc:
        raise _redacted_error(exc, secrets) from exc.__cause__
    text = redact(result.text, secrets)
    if text != result.text:
        try:
            body = storable.data(reading.parse_json(text)) if text else None
        except (ValueError, reading.Unread):
            body = text
        result = replace(result, body=body, text=text)
    if 200 <= result.status < 300:
        return result
    raise status_error(result)


# Methods that only read: a cut answer to one of them changed nothing at the destination.
READ_METHODS = {"GET", "HEAD", "OPTIONS", "PROPFIND", "REPORT"}


def _send(method, url, timeout, json_body, params, headers, data, max_bytes) -> HttpResult:
    if "@" in urlsplit(url).netloc:
        raise ConnectorError(
            ErrorKind.INVALID,
            "request not sent: the address holds a user name or password; put the credential "
            "in the integration's token",
        )
    bounds = reading.Bounds(timeout=timeout, max_bytes=max_bytes)
    if bounds.seconds <= 0:
        raise ConnectorError(
            ErrorKind.TRANSIENT, "request not sent: the time given to these calls had run out"
        )
    headers = dict(headers or {})
    if not any(name.lower() == "accept-encoding" for name in headers):
        headers["Accept-Encoding"] = reading.ACCEPT_ENCODING
    # The failpoint "during_call" kills the process while the request is in flight.
    guard = failpoints.arm_during_call()
    _local.started = requests_started() + 1
    try:
        with reading.Watch(bounds.seconds) as watch:
            response = _request(method, url, timeout, json_body, params, headers, data, watch)
            content = _read(response, bounds, watch, method, timeout)
    finally:
        if guard is not None:
            guard.cancel()
    text = _text(content, response.headers)
    try:
        body = storable.data(reading.parse_json(text)) if text else None
    except ValueError:
        body = text
    except reading.Unread as exc:
        raise cut(method, response.status_code, response.headers, str(exc)) from None
    return HttpResult(
        response.status_code, body, text, storable.data(dict(response.headers)), content=content
    )


def _read(response, bounds, watch, method, timeout) -> bytes:
    """The body within its bounds. A cut answer's connection is closed, never reused; one read
    in full goes back to the pool."""
    try:
        content = reading.read_body(response, bounds, watch)
    except reading.Unread as exc:
        response.close()
        raise cut(method, response.status_code, response.headers, str(exc)) from None
    except (ux.HTTPError, OSError) as exc:
        response.close()
        raise _lost_while_reading(exc, watch, method, response, timeout) from exc
    response.raw.release_conn()
    return content


def _request(method, url, timeout, json_body, params, headers, data, watch):
    """Sends the request and reads the status line and headers (the body is streamed)."""
    try:
        return _session().request(
            method,
            url,
            json=json_body,
            data=data,
            params=params,
            headers=headers,
            timeout=timeout,
            allow_redirects=False,
            stream=True,
        )
    except rx.ConnectTimeout as exc:
        raise ConnectorError(ErrorKind.TRANSIENT, f"connect timeout: {exc}") from exc
    except rx.ReadTimeout as exc:
        if watch.expired:
            raise cut(method, None, {}, watch.words(0)) from exc
        raise ConnectorError(ErrorKind.UNCERTAIN, f"no answer within {timeout}s") from exc
    except rx.ConnectionError as exc:
        if watch.expired:
            raise cut(method, None, {}, watch.words(0)) from exc
        raise _classify_connection_error(exc) from exc
    except rx.RequestException as exc:
        # Invalid URL, a body that cannot be encoded: nothing was sent.
        raise ConnectorError(ErrorKind.INVALID, f"request not sent: {exc}") from exc


def _text(content: bytes, headers) -> str:
    """The body as text when it is text (JSON, XML, text/*), else "". What the destination
    said is made storable before anything keeps it (ledger.storable): a NUL in a 503's body
    must not turn a definite answer into a crash. A document's bytes are not text: decoding
    them would only guess at a charset."""
    if not content or not _textual(headers.get("Content-Type", "")):
        return ""
    charset = requests.utils.get_encoding_from_headers(headers) or "utf-8"
    try:
        return storable.text(content.decode(charset, errors="replace"))
    except LookupError:  # a charset Python does not know
        return storable.text(content.decode("utf-8", errors="replace"))


def cut(method: str, status: int | None, headers, words: str) -> ConnectorError:
    """The error for an answer not read in full (``words``: which bound, ledger.reading).

    What it means follows what was seen, as for any answer:

    - a read (GET, HEAD, OPTIONS, PROPFIND, REPORT) changed nothing: *invalid*, shown and not
      retried as if the destination might recover, unless its status line said otherwise (a
      503 is still the destination asking for time, a 401 still a refusal of credentials);
    - a write whose status line said 2xx (or 3xx), or that had no status line yet: the
      destination may have acted. *Uncertain*, reconciled by a look-up: a cut answer is never
      taken as a refusal of something the destination may have done;
    - a write refused by its status line (4xx, 5xx): the kind that status gives, as if the body
      had been read.
    """
    said = f"; the destination answered {status}" if status is not None else ""
    if status is not None and status >= 400:
        refused = status_error(HttpResult(status, None, "", storable.data(dict(headers))))
        kind, retry_after = refused.kind, refused.retry_after
    elif method.upper() in READ_METHODS:
        kind, retry_after = ErrorKind.INVALID, None
    else:
        kind, retry_after = ErrorKind.UNCERTAIN, None
        said += " and may have acted" if status is not None else "; it may have acted"
    error = ConnectorError(
        kind, f"{words}{said}", status=status, retry_after=retry_after, unread=words
    )
    return error


def _lost_while_reading(exc, watch, method, response, timeout) -> ConnectorError:
    """The connection failed while the body was read: the budget's watchdog (too slow), a
    read timeout or a lost connection (no answer, as before the status line)."""
    if watch.expired:
        return cut(method, response.status_code, response.headers, watch.words(0))
    if isinstance(exc, ux.ReadTimeoutError):
        return ConnectorError(
            ErrorKind.UNCERTAIN,
            f"no answer within {timeout}s (the answer stopped after its status line, "
            f"{response.status_code})",
            status=response.status_code,
        )
    return ConnectorError(
        ErrorKind.UNCERTAIN,
        f"connection lost while reading the answer ({response.status_code}): {str(exc)[:200]}",
        status=response.status_code,
    )


def _textual(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return not media or media.startswith("text/") or "json" in media or "xml" in media


def status_error(result: HttpResult) -> ConnectorError:
    status = result.status
    message = _message(result)
    if 300 <= status < 400:
        return ConnectorError(
            ErrorKind.UNCERTAIN,
            f"{status}: a redirect{_to_where(result)}, not followed: Handover calls only the "
            "address it was given (is the address the destination's API root, with https?)",
            status=status,
            body=result.summary(),
            answer=result.answer(),
        )
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
        answer=result.answer(),
    )


def _to_where(result: HttpResult) -> str:
    """ " to https://host" for a redirect's Location: its scheme and host, never its path."""
    location = next((v for k, v in result.headers.items() if k.lower() == "location"), "")
    try:
        parts = urlsplit(location)
    except ValueError:
        return ""
    if not parts.scheme or not parts.hostname:
        return " to another path of the same host" if location else ""
    return f" to {parts.scheme}://{parts.hostname}"[:120]


def _retry_after(result: HttpResult) -> float | None:
    """Seconds a 429 (or a 503 that names a time) asks us to wait; None for other answers."""
    value = next((v for k, v in result.headers.items() if k.lower() == "retry-after"), None)
    if result.status == 429 or (result.status == 503 and value is not None):
        return parse_retry_after(value)
    return None


def _message(result: HttpResult) -> str:
    """What the destination said, in its own words: field errors first, then a text message.

    Only text counts as a message: many APIs answer ``{"error": true, "errors": {...}}``, and a
    flag read as the message is how a refused request came to say "400: True".
    """
    body = result.body
    if isinstance(body, dict):
        parts = []
        if body.get("errors"):
            parts.append(field_errors(body["errors"]))
        parts += [
            body[k].strip()
            for k in ("error", "detail", "message")
            if isinstance(body.get(k), str) and body[k].strip()
        ]
        if parts:
            return " - ".join(parts)[:1000]
        return json.dumps(body)[:300]
    return (result.text or "").strip()[:300] or "(empty body)"


def field_errors(errors, prefix: str = "") -> str:
    """``{"name": ["already exists"], "custom_fields": {"ward": "is required"}}`` as
    ``name: already exists; custom_fields.ward: is required`` (DRF's shape, and most APIs')."""
    if isinstance(errors, dict):
        parts = []
        for key, value in errors.items():
            label = f"{prefix}.{key}" if prefix else str(key)
            if key == "non_field_errors" and not prefix:
                label = ""
            parts.append(field_errors(value, label))
        return "; ".join(p for p in parts if p)
    if isinstance(errors, list | tuple):
        texts = [field_errors(item) for item in errors]
        text = " ".join(t for t in texts if t)
    else:
        text = "" if errors is None or isinstance(errors, bool) else str(errors).strip()
    if not text:
        return ""
    return f"{prefix}: {text}" if prefix else text


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
