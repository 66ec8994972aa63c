"""The notification provider: send a message (accepted, then delivered or failed), look messages
up by reference to learn whether an uncertain send was accepted and how its delivery went."""

from ledger import http
from ledger.connectors.base import CallResult, Connector, LookupResult

MESSAGES = ("notify", "messages")


class NotifyConnector(Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "POST",
            "path": http.path(*MESSAGES),
            "reference": operation.payload.get("reference"),
            "template": operation.payload.get("template"),
            # Which version of a resident message's template its words were made from.
            "template_version": operation.payload.get("template_version"),
        }

    def call(self, operation):
        response, body, external_id = self.post_write(
            http.path(*MESSAGES), operation, what="message"
        )
        return CallResult(
            response.status,
            external_id,
            response.summary(),
            {"delivery": body.get("status", "accepted")},
        )

    def lookup(self, operation):
        if not self.integration.capabilities.lookup:
            return LookupResult(supported=False)
        response = self.request(
            "GET", http.path(*MESSAGES), params={"reference": self.needs(operation, "reference")}
        )
        template = operation.payload.get("template")
        results = [
            r for r in (response.body or {}).get("results", []) if r.get("template") == template
        ]
        found = [{"id": r.get("id"), "status": r.get("status")} for r in results]
        failed = ""
        if found and all(r["status"] == "failed" for r in found):
            failed = "the provider reports the message as failed to deliver"
        return LookupResult(
            found=found, failed=failed, status=response.status, body=response.summary()
        )
