"""The CRM: create an enquiry record (with reference and idempotency key), look it up by
reference, close it (the compensation for a confirmed create)."""

from ledger.connectors.base import CallResult, Connector, ConnectorError, LookupResult


class CrmCreateConnector(Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "POST",
            "path": "/crm/enquiries",
            "reference": operation.payload.get("reference"),
            "idempotency_key_sent": self.integration.capabilities.idempotency_key,
        }

    def call(self, operation):
        response, _body, external_id = self.post_write("/crm/enquiries", operation)
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
                "GET", "/crm/enquiries", params={"reference": operation.payload["reference"]}
            )
        except ConnectorError as exc:
            if exc.status == 501:
                return LookupResult(supported=False, status=501, body=exc.body)
            raise
        results = (response.body or {}).get("results", [])
        found = [{"id": r.get("id"), "created_at": r.get("created_at")} for r in results]
        return LookupResult(found=found, status=response.status, body=response.summary())


class CrmCloseConnector(Connector):
    def _path(self, operation):
        return f"/crm/enquiries/{operation.payload['external_id']}"

    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "POST",
            "path": self._path(operation) + "/close",
            "external_id": operation.payload.get("external_id"),
        }

    def call(self, operation):
        response = self.request(
            "POST",
            self._path(operation) + "/close",
            operation=operation,
            idempotent=self.integration.capabilities.idempotency_key,
            json_body={"reason": operation.payload.get("reason", "")},
        )
        body = response.body if isinstance(response.body, dict) else {}
        return CallResult(
            response.status,
            str(body.get("id") or operation.payload["external_id"]),
            response.summary(),
            {"closed": bool(body.get("closed")), "closed_at": body.get("closed_at")},
        )

    def lookup(self, operation):
        # "Is the record already closed?" Reading one record by ID needs no search capability.
        response = self.request("GET", self._path(operation))
        body = response.body if isinstance(response.body, dict) else {}
        if body.get("closed"):
            return LookupResult(
                found=[{"id": body.get("id"), "closed_at": body.get("closed_at")}],
                status=response.status,
                body=response.summary(),
            )
        return LookupResult(found=[], status=response.status, body=response.summary())
