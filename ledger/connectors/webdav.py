"""The document store over WebDAV (Nextcloud, SharePoint, most document stores speak it).

A document is read by its path under the integration's base URL (the shared folder), one
segment: the document id, encoded whole by ledger.http.path. Its version is the server's ETag.

- The read asks for the version that was attached: ``GET`` with ``If-Match: "<version>"``. A
  document changed since is a new version, never silently the old one: the server answers 412,
  and the outcome says so (attention ``document_changed``, with the version now on the server,
  read with ``HEAD``), so the new version can be read as what it is.
- An answer whose ETag is not the version asked for (a server that ignores If-Match) is the
  same outcome; an answer with no ETag proves no version and is refused.
- 401/403: access removed (the engine records ``access_denied``); nothing is extracted.
- A timeout, a lost connection or a 5xx is transient: a read changes nothing at the server, so
  asking again is safe, within the integration's retry budget.

The integration's token is ``user:password`` (HTTP Basic, as WebDAV servers and Nextcloud's
app passwords use) or, without a colon, a bearer token (SharePoint).
"""

from __future__ import annotations

import base64

from ledger import extraction, http, reading
from ledger.connectors.base import CallResult, Connector, ConnectorError, ErrorKind


def etag_version(value: str | None) -> str:
    """The version an ETag names: ``"123-456"`` is ``123-456``. A weak ETag (``W/"…"``) cannot
    prove the bytes are the same, so it names no version: ""."""
    text = (value or "").strip()
    if not text or text.startswith("W/"):
        return ""
    return text.strip('"')


class WebDavDocumentRead(Connector):
    def headers(self, operation=None, *, idempotent=False) -> dict[str, str]:
        headers = {"Accept": "*/*"}
        if operation is not None:
            headers["X-Handover-Operation"] = str(operation.pk)
            version = str(operation.payload.get("version") or "")
            if version:
                headers["If-Match"] = f'"{version}"'
        token = (self.integration.token or "") if self.integration is not None else ""
        if ":" in token:
            basic = base64.b64encode(token.encode("utf-8")).decode("ascii")
            headers["Authorization"] = f"Basic {basic}"
        elif token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "GET",
            "path": self.summary_path(operation.payload.get("document_id")),
            "if_match": operation.payload.get("version"),
        }

    def call(self, operation):
        document_id = self.needs(operation, "document_id")
        asked = str(operation.payload.get("version") or "")
        where = http.path(document_id)
        try:
            response = self.request(
                "GET", where, operation=operation, max_bytes=reading.document_max_bytes()
            )
        except ConnectorError as exc:
            if exc.status == 412:
                raise self._changed(asked, self._current_version(where), exc) from exc
            if exc.kind is ErrorKind.UNCERTAIN:
                # A read changes nothing at the server: asking again is safe.
                raise ConnectorError(
                    ErrorKind.TRANSIENT,
                    f"{exc.message} (a read: asked again)",
                    status=exc.status,
                    body=exc.body,
                ) from exc
            raise
        sent = etag_version(response.header("ETag"))
        if not sent:
            raise ConnectorError(
                ErrorKind.INVALID,
                f"the document store sent {document_id} without naming its version (no strong "
                "ETag): cannot tell it is the version that was attached",
                status=response.status,
            )
        if asked and sent != asked:
            raise self._changed(asked, sent, None, status=response.status)
        content_type = response.header("Content-Type") or ""
        try:
            found = extraction.extract(response.content, content_type, document_id)
        except extraction.Unreadable as exc:
            raise ConnectorError(
                ErrorKind.INVALID, f"{document_id} version {sent}: {exc}", status=response.status
            ) from exc
        return CallResult(
            response.status,
            f"{document_id}@{sent}",
            # The attempt keeps what was read, never the document's content.
            f"{len(response.content)} bytes, {found.content_type}, {found.kind}",
            {"version": sent, "kind": found.kind, "fields": len(found.fields)},
            content=shown(found, http.secrets_sent(self.headers(operation))),
        )

    def _current_version(self, where: str) -> str:
        """The version on the server now (HEAD's ETag), or "" when it cannot be told."""
        try:
            response = self.request("HEAD", where)
        except ConnectorError:
            return ""
        return etag_version(response.header("ETag"))

    @staticmethod
    def _changed(asked, current, cause, *, status=412):
        now = f"version {current} is there now" if current else "the server did not say which"
        return ConnectorError(
            ErrorKind.INVALID,
            f"the document changed: version {asked} is no longer on the server ({now})",
            status=status,
            body=cause.body if cause is not None else "",
            attention="document_changed",
            evidence={"asked_version": asked, "current_version": current},
        )


def shown(found: extraction.Extraction, secrets: list[str]) -> dict:
    """What a reviewer is shown of a document: its text and fields with the credential sent
    for it redacted (a store that echoes the request's Authorization header into the document
    must not put the credential on a page)."""
    result = found.as_result()
    result["text"] = http.redact(result["text"], secrets)
    result["fields"] = {
        http.redact(name, secrets): http.redact(value, secrets)
        for name, value in result["fields"].items()
    }
    return result
