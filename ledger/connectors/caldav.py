"""CalDAV (RFC 4791) for the appointments integration, through the caldav client library.

The integration's address is the calendar collection's URL
(``https://calendar.example.org/dav/visits/``); its token is ``user:password``, sent as HTTP
Basic. A read is two requests, both reads that change nothing:

1. ``PROPFIND`` (depth 0) of the calendar: its ``CS:getctag`` and ``DAV:sync-token``, which
   change whenever anything in the calendar changes: the version of what was read;
2. ``REPORT`` calendar-query with a time range (today to the window's end, recurring events
   expanded): the events that make time busy, each with its ``ETag``.

Every request the library makes goes through ``Connector.request`` (the integration's limits,
then ``ledger.http.send``: a timeout always, every failure classified), never through its own
session, and only to the integration's own server: an ``href`` in an answer cannot send the
credentials elsewhere. Only start and end times are kept, never an event's summary.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import date, datetime, time, timedelta

import caldav
from caldav.elements import dav
from caldav.elements.base import ValuedBaseElement
from caldav.lib import error as caldav_error
from django.utils import timezone
from lxml import etree
from requests.structures import CaseInsensitiveDict

from ledger import appointments, http
from ledger.connectors.base import CallResult, Connector, ConnectorError, ErrorKind


class GetCtag(ValuedBaseElement):
    # Apple's calendar collection tag: not in RFC 4791, but Radicale, Nextcloud, SabreDAV,
    # Google and iCloud keep it.
    tag = "{http://calendarserver.org/ns/}getctag"


class _Answer:
    """What caldav.DAVResponse reads from a requests.Response, from our wrapper's result."""

    def __init__(self, result):
        self.headers = CaseInsensitiveDict(result.headers)
        self.content = result.content or result.text.encode("utf-8")
        self.status_code = result.status
        self.reason = ""


class _Session:
    """The caldav client's session: each of its requests made by the connector."""

    def __init__(self, connector: CalDavRead, operation):
        self.connector = connector
        self.operation = operation

    def request(self, method, url, data=None, headers=None, **_ignored):
        # auth, proxies, verify, cert and timeout are the connector's, never the library's.
        result = self.connector.request(
            method, url=str(url), operation=self.operation, data=data, headers=dict(headers or {})
        )
        return _Answer(result)

    def close(self):
        pass


class CalDavRead(Connector):
    """``appointments.read``: busy time in the coming working days, and the free slots."""

    def headers(self, operation=None, *, idempotent=False) -> dict[str, str]:
        headers = {"X-Handover-Operation": str(operation.pk) if operation is not None else ""}
        token = (self.integration.token or "") if self.integration is not None else ""
        if token:
            headers["Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
        return headers

    def request_summary(self, operation):
        return {
            **super().request_summary(operation),
            "calendar": self.integration.base_url,
            "requests": ["PROPFIND getctag sync-token", "REPORT calendar-query time-range"],
        }

    def calendar(self, operation=None) -> caldav.Calendar:
        client = caldav.DAVClient(url=self.integration.base_url)
        client.session = _Session(self, operation)
        return caldav.Calendar(client=client, url=self.integration.base_url)

    def call(self, operation) -> CallResult:
        as_of = timezone.now()
        start, end = appointments.window(as_of)
        calendar = self.calendar(operation)
        try:
            version = self.version(calendar)
            events = calendar.search(
                start=start, end=end, event=True, expand=True, props=[dav.GetEtag()]
            )
            busy, etags = busy_times(events)
        except (caldav_error.DAVError, etree.XMLSyntaxError, ValueError, KeyError) as exc:
            # The library's words may quote the answer, and the answer may echo the request.
            said = http.redact(str(exc), http.secrets_sent(self.headers(operation)))[:500]
            raise ConnectorError(
                ErrorKind.INVALID, f"the calendar's answer could not be read: {said}"[:500]
            ) from exc
        version["events"] = len(etags)
        version["etags"] = hashlib.sha256("\n".join(sorted(etags)).encode()).hexdigest()[:16]
        result = appointments.read_result(
            as_of=as_of,
            busy=busy,
            version=version,
            max_age_seconds=self.integration.max_age_seconds,
        )
        return CallResult(207, "", f"{len(etags)} busy event(s); version {version}", result)

    def version(self, calendar) -> dict:
        props = calendar.get_properties([GetCtag(), dav.SyncToken()])
        secrets = http.secrets_sent(self.headers())
        return {
            "ctag": http.redact(str(props.get(GetCtag.tag) or ""), secrets)[:200],
            "sync_token": http.redact(str(props.get(dav.SyncToken.tag) or ""), secrets)[:200],
        }


def busy_times(events) -> tuple[list[tuple[datetime, datetime]], list[str]]:
    """(busy intervals, "href etag" per event). Transparent and cancelled events free no time
    and take none."""
    busy, etags = [], []
    for event in events:
        component = event.icalendar_component
        etags.append(f"{event.url} {event.props.get(dav.GetEtag.tag, '')}")
        if str(component.get("TRANSP", "")).upper() == "TRANSPARENT":
            continue
        if str(component.get("STATUS", "")).upper() == "CANCELLED":
            continue
        start = _moment(component.decoded("DTSTART"))
        if "DTEND" in component:
            end = _moment(component.decoded("DTEND"))
        elif "DURATION" in component:
            end = start + component.decoded("DURATION")
        elif isinstance(component.decoded("DTSTART"), datetime):
            end = start
        else:
            end = start + timedelta(days=1)  # an all-day event without an end: one day
        busy.append((start, end))
    return busy, etags


def _moment(value) -> datetime:
    """An iCalendar DATE or DATE-TIME as an aware datetime (floating times and dates are the
    console's TIME_ZONE, where people read them)."""
    if isinstance(value, datetime):
        return value if timezone.is_aware(value) else timezone.make_aware(value)
    if isinstance(value, date):
        return timezone.make_aware(datetime.combine(value, time()))
    raise ValueError(f"not a time: {value!r}")
