"""The ``handover`` contract's appointments service (the sandbox): free and taken slots per
day, ``GET /appointments?date=YYYY-MM-DD``, one request per working day the read covers."""

from datetime import datetime

from django.utils import timezone

from ledger import appointments, http
from ledger.connectors.base import CallResult, Connector, ConnectorError, ErrorKind


class AppointmentsConnector(Connector):
    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "method": "GET",
            "path": http.path("appointments"),
            "days": appointments.hours().days,
        }

    def call(self, operation):
        as_of = timezone.now()
        busy = []
        for day in appointments.working_days(as_of, appointments.hours().days):
            response = self.request(
                "GET",
                http.path("appointments"),
                operation=operation,
                params={"date": day.isoformat()},
            )
            body = response.body if isinstance(response.body, dict) else {}
            for slot in body.get("slots") or []:
                if isinstance(slot, dict) and not slot.get("available", False):
                    try:
                        busy.append(
                            (
                                datetime.fromisoformat(str(slot["start"])),
                                datetime.fromisoformat(str(slot["end"])),
                            )
                        )
                    except (KeyError, ValueError) as exc:
                        raise ConnectorError(
                            ErrorKind.INVALID, f"a slot without a readable time: {slot!r}"[:300]
                        ) from exc
        result = appointments.read_result(
            as_of=as_of, busy=busy, version={}, max_age_seconds=self.integration.max_age_seconds
        )
        return CallResult(200, "", f"{len(busy)} taken slot(s)", result)
