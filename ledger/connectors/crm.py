"""The CRM: create an enquiry record (with reference and idempotency key), look it up by
reference, close it (the compensation for a confirmed create)."""

from ledger import http
from ledger.connectors.base import CallResult, Connector, ConnectorError, LookupResult

ENQUIRIES = ("crm", "enquiries")


class CrmRecords:
    def record_url(self, external_id):
        try:
            return self.url(http.path(*ENQUIRIES, external_id))
        except ConnectorError:
            return None


class CrmCreateConnector(CrmRecords, Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "POST",
            "path": http.path(*ENQUIRIES),
            "reference": operation.payload.get("reference"),
            "idempotency_key_sent": self.integration.capabilities.idempotency_key,
        }

    def call(self, operation):
        response, _body, external_id = self.post_write(http.path(*ENQUIRIES), operation)
        return CallResult(
            response.status,
            external_id,
            response.summary(),
            {"replayed": response.headers.get("Idempotent-Replayed") == "true"},
        )

    def lookup(self, operation):
        if not self.integration.capabilities.lookup:
            return LookupResult(supported=False)
        try:
            response = self.request(
                "GET",
                http.path(*ENQUIRIES),
                params={"reference": self.needs(operation, "reference")},
            )
        except ConnectorError as exc:
            if exc.status == 501:
                return LookupResult(supported=False, status=501, body=exc.body)
            raise
        results = (response.body or {}).get("results", [])
        found = [{"id": r.get("id"), "created_at": r.get("created_at")} for r in results]
        return LookupResult(found=found, status=response.status, body=response.summary())


class CrmCloseConnector(CrmRecords, Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "POST",
            "path": self.summary_path(*ENQUIRIES, operation.payload.get("external_id"), "close"),
            "external_id": operation.payload.get("external_id"),
        }

    def call(self, operation):
        response = self.request(
            "POST",
            http.path(*ENQUIRIES, self.needs(operation, "external_id"), "close"),
            operation=operation,
            idempotent=self.integration.capabilities.idempotency_key,
            json_body={"reason": operation.payload.get("reason", "")},
        )
        body = response.body if isinstance(response.body, dict) else {}
        return CallResult(
            response.status,
            str(body.get("id") or self.needs(operation, "external_id")),
            response.summary(),
            {"closed": bool(body.get("closed")), "closed_at": body.get("closed_at")},
        )

    def lookup(self, operation):
        # "Is the record already closed?" Reading one record by ID needs no search capability.
        response = self.request("GET", http.path(*ENQUIRIES, self.needs(operation, "external_id")))
        body = response.body if isinstance(response.body, dict) else {}
        if body.get("closed"):
            return LookupResult(
                found=[{"id": body.get("id"), "closed_at": body.get("closed_at")}],
                status=response.status,
                body=response.summary(),
            )
        return LookupResult(found=[], status=response.status, body=response.summary())
