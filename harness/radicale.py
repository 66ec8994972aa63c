"""Start a real CalDAV server (Radicale) for tests, the drill and the soak.

    with Radicale() as server:
        server.calendar_url                # http://127.0.0.1:<port>/handover/visits/
        server.credentials                 # "handover:<random password>", the integration's token
        server.add_busy(start, end)        # a VEVENT PUT into the calendar; its UID
        assert server.event_count() == 1   # counted by the server's own listing

    python -m harness.radicale             # one for people: prints the URL until Ctrl-C

Radicale 3.9 (pinned in requirements-dev.txt) runs as its own process on a free loopback port
with a configuration written for the run, never its defaults: Radicale's defaults listen on
``localhost:5232``, refuse everyone (``auth = denyall``), keep collections in
``/var/lib/radicale/collections`` and read ``/etc/radicale/config`` and
``~/.config/radicale/config``. Here: ``127.0.0.1:<free port>``, an htpasswd file with one user
and a random password (plain text: it is test equipment), storage in a folder of its own
(deleted at stop unless the caller gave one), ``HOME`` pointed at that folder so no user
configuration is read, and ``delay_on_error``/the failed-login delay at their minimum so a
fault costs no extra second. There is nothing to build or cache: the first start of a machine
pays only Python's imports (docs/sandbox.md, "A real CalDAV server").
"""

from __future__ import annotations

import argparse
import re
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import requests

from harness.bottlecrm_build import die_with_parent
from harness.processes import Child, free_port

USER = "handover"
CALENDAR = "visits"
STARTUP_TIMEOUT_SECONDS = 30.0
CONFIG = """\
[server]
hosts = 127.0.0.1:{port}
max_connections = 8
timeout = 30
delay_on_error = 0.01

[auth]
type = htpasswd
htpasswd_filename = {users}
htpasswd_encryption = plain
delay = 0.01

[rights]
type = owner_only

[storage]
filesystem_folder = {collections}

[web]
type = none

[logging]
level = info
"""


class RadicaleError(RuntimeError):
    """Radicale did not start, or a call to it failed."""


class Radicale(Child):
    """A Radicale process with one user and one calendar (``seed`` busy events optional)."""

    def __init__(
        self,
        *,
        folder: str | Path | None = None,
        calendar: str = CALENDAR,
        startup_timeout: float = STARTUP_TIMEOUT_SECONDS,
    ):
        self.own_folder = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="radicale-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.calendar = calendar
        self.password = secrets.token_urlsafe(16)
        self.port: int | None = None
        self.startup_timeout = startup_timeout
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.auth = (USER, self.password)
        super().__init__(
            "radicale",
            [],
            log_path=self.folder / "radicale.log",
            own_session=False,
            preexec_fn=die_with_parent,
            fresh_log=True,
        )

    # -- process -----------------------------------------------------------------------------

    def start(self) -> Radicale:
        if self.running:
            raise RadicaleError(f"radicale already running at {self.url}")
        self.port = free_port()
        (self.folder / "users").write_text(f"{USER}:{self.password}\n")
        (self.folder / "collections").mkdir(exist_ok=True)
        config = self.folder / "config"
        config.write_text(
            CONFIG.format(
                port=self.port,
                users=self.folder / "users",
                collections=self.folder / "collections",
            )
        )
        self.command = [sys.executable, "-m", "radicale", "--config", str(config)]
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.folder),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
        }
        started = time.monotonic()
        super().start()
        self.wait_answers(self.url + "/", timeout=self.startup_timeout, error=RadicaleError)
        self._make_calendar()  # our password works: the answer is ours, not another process's
        self.started_in = time.monotonic() - started
        return self

    def stop(self, timeout: float | None = None) -> None:
        super().stop(timeout)
        self.session.close()
        if self.own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    @property
    def url(self) -> str:
        if self.port is None:
            raise RadicaleError("radicale not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def calendar_url(self) -> str:
        return f"{self.url}/{USER}/{self.calendar}/"

    @property
    def credentials(self) -> str:
        """The integration's token for the ``caldav`` kind: ``user:password`` (HTTP Basic)."""
        return f"{USER}:{self.password}"

    # -- the calendar ------------------------------------------------------------------------

    def _call(self, method: str, url: str, **kwargs) -> requests.Response:
        response = self.session.request(method, url, timeout=10, **kwargs)
        if response.status_code >= 400:
            raise RadicaleError(f"{method} {url} -> {response.status_code}: {response.text[:300]}")
        return response

    def _make_calendar(self) -> None:
        # Radicale makes the user's own collection at their first authenticated request.
        self._call("PROPFIND", f"{self.url}/{USER}/", headers={"Depth": "0"})
        self._call("MKCALENDAR", self.calendar_url)

    def add_busy(self, start: datetime, end: datetime, *, uid: str | None = None, **extra) -> str:
        """A busy VEVENT from ``start`` to ``end`` (aware datetimes); ``extra``: more
        properties (``TRANSP="TRANSPARENT"``, ``STATUS="CANCELLED"``). Returns its UID."""
        uid = uid or uuid.uuid4().hex
        lines = [
            "BEGIN:VCALENDAR",
            "VERSION:2.0",
            "PRODID:-//Handover//harness//EN",
            "BEGIN:VEVENT",
            f"UID:{uid}",
            f"DTSTAMP:{_utc(datetime.now(UTC))}",
            f"DTSTART:{_utc(start)}",
            f"DTEND:{_utc(end)}",
            "SUMMARY:Busy (harness)",
            *(f"{key}:{value}" for key, value in extra.items()),
            "END:VEVENT",
            "END:VCALENDAR",
        ]
        self._call(
            "PUT",
            f"{self.calendar_url}{uid}.ics",
            data="\r\n".join(lines) + "\r\n",
            headers={"Content-Type": "text/calendar; charset=utf-8"},
        )
        return uid

    def uids(self) -> list[str]:
        """The calendar's events, by UID, from the server's own listing (PROPFIND, depth 1)."""
        response = self._call("PROPFIND", self.calendar_url, headers={"Depth": "1"})
        return re.findall(rf"{re.escape(self.calendar)}/([^/<]+)\.ics<", response.text)

    def clear(self) -> None:
        """Remove every event (the calendar stays)."""
        for uid in self.uids():
            self.remove(uid)

    def remove(self, uid: str) -> None:
        self._call("DELETE", f"{self.calendar_url}{uid}.ics")

    def event_count(self) -> int:
        """Events the server holds in the calendar: its own listing (PROPFIND, depth 1)."""
        return len(self.uids())

    def ctag(self) -> str:
        body = (
            '<?xml version="1.0"?><propfind xmlns="DAV:" '
            'xmlns:CS="http://calendarserver.org/ns/"><prop><CS:getctag/></prop></propfind>'
        )
        response = self._call("PROPFIND", self.calendar_url, data=body, headers={"Depth": "0"})
        text = response.text
        start = text.find("getctag>") + len("getctag>")
        return text[start : text.find("<", start)]


def _utc(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("an event's time must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run a Radicale CalDAV server for trials.")
    parser.parse_args(argv)
    with Radicale() as server:
        print(f"Radicale at {server.url} (started in {server.started_in:.1f}s)")
        print(f"APPOINTMENTS_KIND=caldav APPOINTMENTS_BASE_URL={server.calendar_url} ", end="")
        print(f"APPOINTMENTS_TOKEN={server.credentials}")
        print("Ctrl-C stops it and deletes its storage.", flush=True)
        try:
            while server.running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
