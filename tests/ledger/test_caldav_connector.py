"""The caldav kind's read with ``ledger.http.send`` patched (the one allowed patch point): what
is sent, where, with which credentials, and how answers become busy time or a typed error.
The same read against a real Radicale: tests/ledger/test_caldav.py."""

from __future__ import annotations

from datetime import datetime

import pytest
import time_machine
from django.utils import timezone

from ledger import http
from ledger.connectors.base import ConnectorError, ErrorKind
from ledger.connectors.caldav import CalDavRead
from ledger.kinds import KINDS
from ledger.models import Integration

CALENDAR = "https://cal.example.org/dav/handover/visits/"
NOW = datetime(2030, 3, 4, 8, 0, tzinfo=timezone.get_default_timezone())  # a Monday

PROPS = """<?xml version="1.0"?><multistatus xmlns="DAV:" xmlns:CS="http://calendarserver.org/ns/">
<response><href>/dav/handover/visits/</href><propstat><prop><CS:getctag>"c1"</CS:getctag>
<sync-token>tok-1</sync-token></prop><status>HTTP/1.1 200 OK</status></propstat></response>
</multistatus>"""


def event(href, start, end, *extra):
    lines = "\n".join(extra)
    return f"""<response><href>{href}</href><propstat><prop><getetag>"e-{href[-6:]}"</getetag>
<C:calendar-data>BEGIN:VCALENDAR
VERSION:2.0
PRODID:test
BEGIN:VEVENT
UID:{href}
DTSTAMP:20300101T000000Z
DTSTART:{start}
DTEND:{end}
{lines}
END:VEVENT
END:VCALENDAR
</C:calendar-data></prop><status>HTTP/1.1 200 OK</status></propstat></response>"""


def report(*events):
    return (
        '<?xml version="1.0"?><multistatus xmlns="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">'
        + "".join(events)
        + "</multistatus>"
    )


class Calendar:
    """Scripted answers, in order; each a (status, text) or an exception."""

    def __init__(self, monkeypatch, *answers):
        self.answers = list(answers)
        self.calls = []
        monkeypatch.setattr(http, "send", self.send)

    def send(self, method, url, *, timeout, headers=None, data=None, **kwargs):
        assert timeout > 0
        self.calls.append((method, url, dict(headers or {}), data))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, text = answer
        result = http.HttpResult(status, text, text, {"Content-Type": "text/xml"}, text.encode())
        if status >= 300:
            raise http.status_error(result)
        return result


@pytest.fixture
def row(db, child_process):
    """The appointments row, kind caldav (a calendar's events are read in ledger.budget's child
    process)."""
    from ledger.integrations import ensure_integrations

    ensure_integrations()
    Integration.objects.filter(name="appointments").update(
        kind="caldav", base_url=CALENDAR, token="handover:s3cret", max_age_seconds=120
    )
    return Integration.objects.get(name="appointments")


class Op:
    pk = "op-1"
    action = "appointments.read"
    idempotency_key = "e:appointments.read:read1:r1"


@time_machine.travel(NOW, tick=False)
def test_a_read_is_a_propfind_then_a_report_with_basic_auth_on_the_calendar(monkeypatch, row):
    calendar = Calendar(
        monkeypatch,
        (207, PROPS),
        (
            207,
            report(
                event("/dav/handover/visits/a1.ics", "20300304T100000Z", "20300304T120000Z"),
                event(
                    "/dav/handover/visits/b2.ics",
                    "20300305T090000Z",
                    "20300305T100000Z",
                    "TRANSP:TRANSPARENT",
                ),
            ),
        ),
    )
    result = CalDavRead(row).call(Op()).result
    methods = [(m, u) for m, u, _h, _d in calendar.calls]
    assert methods == [("PROPFIND", CALENDAR), ("REPORT", CALENDAR)]
    headers = calendar.calls[1][2]
    assert headers["Authorization"] == "Basic aGFuZG92ZXI6czNjcmV0"  # handover:s3cret
    assert headers["X-Handover-Operation"] == "op-1" and headers["Depth"] == "1"
    assert b"time-range" in calendar.calls[1][3] or "time-range" in calendar.calls[1][3]
    assert result["as_of"] == NOW.isoformat() and result["max_age_seconds"] == 120.0
    assert result["busy"] == [["2030-03-04T10:00:00+00:00", "2030-03-04T12:00:00+00:00"]]
    assert result["version"]["ctag"] == '"c1"' and result["version"]["sync_token"] == "tok-1"
    assert result["version"]["events"] == 2
    first_day = [s for s in result["slots"] if s[0].startswith("2030-03-04")]
    assert [s[0][11:16] for s in first_day] == [
        "09:00",
        "12:00",
        "13:00",
        "14:00",
        "15:00",
        "16:00",
    ]


@pytest.mark.parametrize(
    "answer, kind",
    [
        ((401, "no"), ErrorKind.AUTH),
        ((403, "no"), ErrorKind.AUTH),
        ((503, "down"), ErrorKind.TRANSIENT),
        ((404, "no such calendar"), ErrorKind.INVALID),
        ((500, "oops"), ErrorKind.UNCERTAIN),
        (ConnectorError(ErrorKind.UNCERTAIN, "no answer within 2s"), ErrorKind.UNCERTAIN),
        ((207, "<not xml"), ErrorKind.INVALID),
    ],
)
def test_each_answer_is_classified(monkeypatch, row, answer, kind):
    Calendar(monkeypatch, answer)
    with pytest.raises(ConnectorError) as raised:
        CalDavRead(row).call(Op())
    assert raised.value.kind is kind


def test_an_href_on_another_server_is_never_sent_to(monkeypatch, row):
    calendar = Calendar(monkeypatch)
    with pytest.raises(ConnectorError) as raised:
        CalDavRead(row).request("REPORT", url="https://elsewhere.example/dav/x.ics")
    assert raised.value.kind is ErrorKind.INVALID and calendar.calls == []
    assert "not on the integration's server" in raised.value.message


def test_the_token_must_be_user_colon_password(row):
    row.token = "just-a-token"
    assert "user:password" in KINDS["caldav"].validate(row)["token"]
    row.token = ""
    assert "token" not in KINDS["caldav"].validate(row)
    row.name = "crm"
    assert "kind" in KINDS["caldav"].validate(row)


@time_machine.travel(NOW, tick=False)
def test_a_rule_repeating_every_minute_for_years_is_refused_by_its_count_before_it_is_expanded(
    monkeypatch, row
):
    """Since 2020, every minute: millions of steps before the window opens (what made a read
    cost a minute). Counted from the rule alone, nothing expanded: too large to read."""
    Calendar(
        monkeypatch,
        (207, PROPS),
        (
            207,
            report(
                event(
                    "/dav/handover/visits/m1.ics",
                    "20200101T000000Z",
                    "20200101T000100Z",
                    "RRULE:FREQ=MINUTELY",
                )
            ),
        ),
    )
    with pytest.raises(ConnectorError) as raised:
        CalDavRead(row).call(Op())
    assert raised.value.kind is ErrorKind.INVALID
    assert "too large to read: its recurring events repeat more than 100,000 times" in (
        raised.value.message
    )


@pytest.mark.parametrize(
    "bad",
    ["DURATION:PXYZ", "RRULE:INTERVAL=2", "RRULE:FREQ=SOMETIMES"],
    ids=["duration", "no-freq", "odd-freq"],
)
@time_machine.travel(NOW, tick=False)
def test_an_event_that_is_not_icalendar_is_invalid_never_uncertain(monkeypatch, row, bad):
    Calendar(
        monkeypatch,
        (207, PROPS),
        (
            207,
            report(
                event(
                    "/dav/handover/visits/d1.ics", "20300304T100000Z", "20300304T110000Z", bad
                ).replace("DTEND:20300304T110000Z\n", "")
            ),
        ),
    )
    with pytest.raises(ConnectorError) as raised:
        CalDavRead(row).call(Op())
    assert raised.value.kind is ErrorKind.INVALID
    assert raised.value.message.startswith("the calendar")


def test_a_calendar_that_echoes_the_credential_keeps_it_out_of_the_version(monkeypatch, row):
    sent = "Basic aGFuZG92ZXI6czNjcmV0"  # handover:s3cret
    echoed = PROPS.replace('"c1"', f"said {sent}").replace("tok-1", sent)
    Calendar(monkeypatch, (207, echoed), (207, report()))
    version = CalDavRead(row).call(Op()).result["version"]
    assert version["ctag"] == "said [redacted]" and version["sync_token"] == "[redacted]"
