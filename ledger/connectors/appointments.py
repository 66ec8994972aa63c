"""The ``handover`` contract's appointments service (the sandbox): free and taken slots per
day, ``GET /appointments?date=YYYY-MM-DD``, one request per working day the read covers. At most
CALENDAR_MAX_OCCURRENCES taken slots in all, as for a calendar (docs/integrations.md, "What a
read may cost"): past it the read is invalid, too large to read."""

from datetime import datetime

from django.utils import timezone

from ledger import appointments, http
from ledger.connectors.base import CallResult, Connector, ConnectorError, ErrorKind
from ledger.connectors.calendar_events import max_occurrences


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
        limit = max_occurrences()
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
                    if any(timezone.is_naive(moment) for moment in busy[-1]):
                        raise ConnectorError(
                            ErrorKind.INVALID, f"a slot without a time zone: {slot!r}"[:300]
                        )
                    if len(busy) > limit:
                        raise ConnectorError(
                            ErrorKind.INVALID,
                            f"the appointments are too large to read: more than {limit:,} taken "
                            "slots in the window",
                        )
        result = appointments.read_result(
            as_of=as_of, busy=busy, version={}, max_age_seconds=self.integration.max_age_seconds
        )
        return CallResult(200, "", f"{len(busy)} taken slot(s)", result)
