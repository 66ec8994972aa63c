"""The appointments service: free slots for a day, stamped with when they were true."""

from ledger import http
from ledger.connectors.base import CallResult, Connector


class AppointmentsConnector(Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "GET",
            "path": http.path("appointments"),
            "date": operation.payload.get("date"),
        }

    def call(self, operation):
        response = self.request(
            "GET",
            http.path("appointments"),
            operation=operation,
            params={"date": operation.payload["date"]},
        )
        body = response.body if isinstance(response.body, dict) else {}
        return CallResult(
            response.status,
            "",
            response.summary()[:300],
            {
                "date": body.get("date"),
                "slots": body.get("slots", []),
                "as_of": body.get("as_of"),
                "max_age_seconds": body.get("max_age_seconds"),
            },
        )
