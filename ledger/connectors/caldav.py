"""CalDAV (RFC 4791) for the appointments integration, through the caldav client library.

The integration's address is the calendar collection's URL
(``https://calendar.example.org/dav/visits/``); its token is ``user:password``, sent as HTTP
Basic. A read is two requests, both reads that change nothing:

1. ``PROPFIND`` (depth 0) of the calendar: its ``CS:getctag`` and ``DAV:sync-token``, which
   change whenever anything in the calendar changes: the version of what was read;
2. ``REPORT`` calendar-query with a time range (today to the window's end): the events that make
   time busy, each with its ``ETag``. Recurring events come as their rules and are expanded here,
   within limits (ledger.connectors.calendar_events): a calendar that cannot be read within them
   ("too large to read", "too slow to read"), or that is not iCalendar (a bad ``DURATION``), is
   *invalid*, told once and not retried.

Every request the library makes goes through ``Connector.request`` (the integration's limits,
then ``ledger.http.send``: a timeout always, every failure classified), never through its own
session, and only to the integration's own server: an ``href`` in an answer cannot send the
credentials elsewhere. Only start and end times are kept, never an event's summary.
"""

from __future__ import annotations

import base64
import hashlib

import caldav
from caldav.elements import dav
from caldav.elements.base import ValuedBaseElement
from caldav.lib import error as caldav_error
from django.utils import timezone
from lxml import etree
from requests.structures import CaseInsensitiveDict

from ledger import appointments, http
from ledger.connectors.base import CallResult, Connector, ConnectorError, ErrorKind
from ledger.connectors.calendar_events import TooLarge, read_busy

# What reading an answer can raise when it is not what RFC 4791 and RFC 5545 say (the library's
# own errors, lxml's, icalendar's and recurring_ical_events' are ValueErrors or these).
UNREADABLE = (
    caldav_error.DAVError,
    etree.XMLSyntaxError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
)


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
            # Not expanded by the server or the library: each would expand whatever a rule says.
            events = calendar.search(
                start=start, end=end, event=True, expand=False, props=[dav.GetEtag()]
            )
            resources = [
                (str(e.url), str(e.props.get(dav.GetEtag.tag, "")), e.data) for e in events
            ]
            busy, etags = read_busy(resources, start, end)
        except TooLarge as exc:
            raise ConnectorError(ErrorKind.INVALID, f"the calendar is {exc}"[:500]) from exc
        except UNREADABLE as exc:
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
