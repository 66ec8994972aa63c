"""The document store: read one version of an attached document (403 when access is removed)."""

from ledger import http, reading
from ledger.connectors.base import CallResult, Connector


class DocumentsConnector(Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "GET",
            "path": self.summary_path("docs", operation.payload.get("document_id")),
            "version": operation.payload.get("version"),
        }

    def call(self, operation):
        params = {}
        if operation.payload.get("version"):
            params["version"] = operation.payload["version"]
        response = self.request(
            "GET",
            http.path("docs", self.needs(operation, "document_id")),
            operation=operation,
            params=params,
            max_bytes=reading.document_max_bytes(),
        )
        body = response.body if isinstance(response.body, dict) else {}
        read = body.get("id", operation.payload["document_id"])
        return CallResult(
            response.status,
            f"{read}@{body.get('version', '')}",
            response.summary(),
            {
                "version": body.get("version"),
                "content_type": body.get("content_type", ""),
                "content": body.get("content"),
            },
        )
