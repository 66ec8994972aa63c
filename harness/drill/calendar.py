"""The drill's appointments calendar: a real Radicale (harness.radicale) behind the fault proxy,
seeded with busy events, the appointments integration pointed at it (kind ``caldav``).

Records are counted at the server (its own listing); faults are armed at the proxy on the two
requests a read makes: ``appointments.version`` (PROPFIND: ctag, sync-token) and
``appointments.events`` (REPORT: the events in the window).
"""

from __future__ import annotations

from datetime import datetime, time
from pathlib import Path

from django.utils import timezone

from harness.faultproxy import FaultProxy
from harness.radicale import CALENDAR, USER, Radicale
from intake.models import Category
from ledger import appointments
from ledger.models import Integration

TARGETS = {
    "appointments.version": f"PROPFIND /{USER}/{CALENDAR}/",
    "appointments.events": f"REPORT /{USER}/{CALENDAR}/",
}
# Short enough that the stale cases wait seconds, not minutes (the row's lowest allowed).
MAX_AGE_SECONDS = 10.0
VISIT_CATEGORY = "drill-visit"


class DrillCalendar:
    def __init__(self, folder: Path):
        self.server = Radicale(folder=folder / "radicale")
        self.proxy: FaultProxy | None = None
        self.folder = folder

    def start(self) -> DrillCalendar:
        self.server.start()
        self.proxy = FaultProxy(
            self.server.url, targets=TARGETS, log_path=self.folder / "calendar-proxy.log"
        ).start()
        self.seed()
        return self

    def seed(self):
        """Busy mornings on the next working day: 09:00-11:00 and 14:00-15:00 local."""
        day = appointments.working_days(timezone.now(), 2)[1]
        for start, end in ((9, 11), (14, 15)):
            self.server.add_busy(at(day, start), at(day, end))

    @property
    def url(self) -> str:
        return self.server.calendar_url.replace(self.server.url, self.proxy.url)

    def point(self, settings: dict):
        """The appointments row at the proxy, kind caldav, with the drill's short settings."""
        Integration.objects.filter(name=Integration.APPOINTMENTS).update(
            **{
                **settings,
                "kind": "caldav",
                "base_url": self.url,
                "token": self.server.credentials,
                "max_age_seconds": MAX_AGE_SECONDS,
            }
        )

    def visit_category(self) -> Category:
        category, _ = Category.objects.update_or_create(
            slug=VISIT_CATEGORY,
            defaults={"name": "Drill home visit", "active": True, "books_appointments": True},
        )
        return category

    def records(self) -> int:
        return self.server.event_count()

    def describe(self) -> str:
        return f"Radicale at {self.server.url} through the fault proxy at {self.proxy.url}"

    def close(self):
        if self.proxy is not None:
            self.proxy.stop()
        self.server.stop()


def at(day, hour) -> datetime:
    return timezone.make_aware(datetime.combine(day, time(hour)))
