"""ledger.limits in this process against the real database and sandbox: Retry-After parsing,
the shared pace, in-flight leases, and the engine honouring a 429 without spending the budget.
(The same across real clusters: tests/ledger/test_limits_workers.py.)"""

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from django.utils import timezone

from ledger import limits, tasks
from ledger.connectors.base import ErrorKind
from ledger.execution import Lookup
from ledger.http import HttpResult, status_error
from ledger.models import InFlightSlot, Integration, JournalEntry, Operation, OperationState
from tests.ledger.conftest import crm_records

NOW = datetime(2030, 1, 2, 14, 0, 0, tzinfo=UTC)


# --- Retry-After --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 120 ", 120.0),
        ("0", 1.0),  # at least LIMITS_MIN_RETRY_AFTER: "0" would mean asking again at once
        ("Wed, 02 Jan 2030 14:00:30 GMT", 30.0),
        ("Wed, 02 Jan 2030 13:59:00 GMT", 1.0),  # already past: the floor
        ("Wed, 02 Jan 2030 14:00:10 -0000", 10.0),  # no zone claimed: read as UTC
        ("99999999", 3600.0),  # capped at LIMITS_MAX_RETRY_AFTER
    ],
)
def test_retry_after_is_seconds_or_an_http_date(value, seconds):
    assert limits.parse_retry_after(value, now=NOW) == seconds


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "  ",
        "²",  # isdigit() says yes, int() says no
        "٣",  # int() reads it as 3; the header's grammar is ASCII digits only
        "-1",
        "1.5",
        "soon",
        "Wed, 99 Foo 2030 25:61:00 GMT",
        "9" * 40,
    ],
)
def test_a_retry_after_that_cannot_be_read_waits_the_default(value, settings):
    settings.LIMITS_DEFAULT_RETRY_AFTER = 7.0
    assert limits.parse_retry_after(value, now=NOW) == 7.0


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"),
    [
        (429, {"Retry-After": "3"}, 3.0),
        (429, {"retry-after": "4"}, 4.0),  # header names are case-insensitive
        (429, {}, 5.0),  # a 429 always asks us to slow down: the default
        (503, {"Retry-After": "2"}, 2.0),
        (503, {}, None),  # an outage: ordinary transient, the budget applies
        (502, {"Retry-After": "2"}, None),
    ],
)
def test_a_429_or_a_503_naming_a_time_carries_retry_after(status, headers, retry_after):
    error = status_error(HttpResult(status, None, "", headers))
    assert error.kind is ErrorKind.TRANSIENT
    assert error.retry_after == retry_after


# --- the pace and the in-flight slots -----------------------------------------------------------


@pytest.fixture
def crm(integrations, settings):
    settings.LIMITS_RATE_MARGIN = 0.0
    settings.LIMITS_WAIT_SECONDS = 0.5
    row = integrations["crm"]
    row.max_requests_per_second = 10.0
    row.save()
    return row


def test_turns_are_one_interval_apart_and_a_far_one_is_not_waited_for(crm):
    got = [limits.acquire(crm, now=NOW) for _ in range(8)]
    permits = [g for g in got if isinstance(g, limits.Permit)]
    later = [g for g in got if isinstance(g, limits.NotYet)]
    # 0, 0.1 ... 0.5 s are within LIMITS_WAIT_SECONDS: waited for in the worker.
    assert [(p.slot_at - NOW).total_seconds() for p in permits] == pytest.approx(
        [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    )
    # The next free slot is further: not taken, not waited for.
    assert [(n.at - NOW).total_seconds() for n in later] == pytest.approx([0.6, 0.6])
    assert not any(n.throttled for n in later)


def test_operations_turned_away_come_back_one_interval_apart_in_order(crm):
    assert limits.admission(crm, now=NOW) is None  # nothing queued: its request takes a turn
    for _ in range(7):
        limits.acquire(crm, now=NOW)  # turns up to 0.6 s away taken (six of them)
    back = [limits.admission(crm, now=NOW) for _ in range(3)]
    assert [(n.at - NOW).total_seconds() for n in back] == pytest.approx([0.6, 0.7, 0.8])
    # A throttle: everyone comes back after it, still one interval apart.
    until = NOW + timedelta(seconds=30)
    Integration.objects.filter(pk=crm.pk).update(throttled_until=until, throttle_reason="429")
    after = [limits.admission(crm, now=NOW) for _ in range(2)]
    assert [(n.at - until).total_seconds() for n in after] == pytest.approx([0.0, 0.1])
    assert all(n.throttled for n in after)


def test_idle_time_builds_no_burst(crm):
    limits.acquire(crm, now=NOW)
    much_later = NOW + timedelta(seconds=60)
    first, second = (limits.acquire(crm, now=much_later) for _ in range(2))
    assert first.slot_at == much_later
    assert (second.slot_at - much_later).total_seconds() == pytest.approx(0.1)


def test_a_released_backlog_is_given_turns_at_the_rate_oldest_first(crm, approved_enquiry):
    from ledger.services import backlog, pause_integration, release_backlog, resume_integration

    pause_integration("crm", actor="system:test", reason="outage")
    ops = [approved_enquiry()[1] for _ in range(5)]
    assert backlog("crm").count() == 5
    resume_integration("crm", actor="system:test", reason="back")
    release_backlog("crm", actor="system:test", reason="drain")
    rows = list(Operation.objects.filter(pk__in=[o.pk for o in ops]).order_by("created_at"))
    turns = [op.next_attempt_at for op in rows]
    assert len(rows) == len(ops)
    assert all(not op.held for op in rows)
    assert turns == sorted(turns)
    gaps = [(b - a).total_seconds() for a, b in pairwise(turns)]
    assert gaps == pytest.approx([0.1] * 4)


def test_in_flight_slots_are_leases_given_back_on_release_or_expiry(integrations):
    crm = integrations["crm"]
    crm.max_in_flight = 1
    crm.save()
    first = limits.acquire(crm, holder="system:worker-elsewhere-1", now=NOW)
    assert isinstance(first, limits.Permit) and first.lease_id is not None
    assert isinstance(limits.acquire(crm, now=NOW), limits.NotYet)
    first.release()
    second = limits.acquire(crm, holder="system:worker-elsewhere-1", now=NOW)
    assert isinstance(second, limits.Permit)
    # Never released (its worker was killed): the lease runs out and the slot comes back.
    expired = NOW + timedelta(seconds=limits.in_flight_seconds() + 1)
    assert isinstance(limits.acquire(crm, now=expired), limits.Permit)
    assert InFlightSlot.objects.filter(pk=second.lease_id).count() == 0


def test_an_unlimited_integration_is_not_asked_about(integrations):
    assert not limits.applies(integrations["crm"])
    assert not limits.applies(None)


# --- the engine and a 429 -----------------------------------------------------------------------


def test_a_429_throttles_the_integration_and_spends_no_budget(
    approved_enquiry, sandbox, run_queue, integrations
):
    sandbox.fault("crm.create", "error_429", delay_ms=3000)
    enquiry, op = approved_enquiry()
    before = timezone.now()
    assert tasks.execute_operation(str(op.pk)) == "throttled"
    op.refresh_from_db()
    crm = Integration.objects.get(name="crm")
    assert op.state == OperationState.APPROVED
    assert op.budget_used == 0  # the throttled call does not count
    assert op.attention == ""
    assert op.last_error_class == "throttled"
    assert crm.throttled_until >= before + timedelta(seconds=3)
    assert op.next_attempt_at == crm.throttled_until
    assert [a.outcome for a in op.attempts.all()] == ["throttled"]
    defer = JournalEntry.objects.get(subject_id=str(op.pk), action="ledger.operation.defer")
    assert "throttled by the CRM until" in defer.reason
    assert JournalEntry.objects.filter(
        subject_id=str(crm.pk), action="ledger.integration.throttled"
    ).exists()

    # Another operation for the throttled CRM is not sent: it is queued for the end of the wait.
    _other_enquiry, other = approved_enquiry()
    assert tasks.execute_operation(str(other.pk)) == "nothing to claim"
    other.refresh_from_db()
    assert (other.state, other.next_attempt_at) == (OperationState.APPROVED, crm.throttled_until)
    assert other.attempts.count() == 0
    assert sandbox.stats()["requests"]["crm.create"] == 1

    # The wait is over (moved, not slept): both are delivered, once each.
    Integration.objects.filter(pk=crm.pk).update(throttled_until=timezone.now())
    Operation.objects.filter(pk__in=[op.pk, other.pk]).update(next_attempt_at=None)
    for row in (op, other):
        tasks.execute_operation(str(row.pk))
        row.refresh_from_db()
        assert row.state == OperationState.CONFIRMED
    assert op.budget_used == 1
    assert crm_records(sandbox, enquiry.reference) == 1
    assert crm_records(sandbox) == 2


def test_a_429_to_a_lookup_looks_again_later_without_a_person(
    approved_enquiry, sandbox, run_queue, integrations
):
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    sandbox.fault("crm.lookup", "error_429", delay_ms=2000)
    _enquiry, op = approved_enquiry()
    assert tasks.execute_operation(str(op.pk)) == "unknown"
    assert tasks.reconcile_operation(str(op.pk)) is Lookup.THROTTLED
    op.refresh_from_db()
    assert (op.state, op.attention) == (OperationState.UNKNOWN, "")
    assert op.next_attempt_at == Integration.objects.get(name="crm").throttled_until
    assert [a.outcome for a in op.attempts.all()] == ["uncertain", "throttled"]
    assert crm_records(sandbox) == 1


def test_the_queue_and_the_item_page_show_the_throttle_not_a_failure(
    approved_enquiry, sandbox, integrations, make_user, client
):
    from django.urls import reverse

    sandbox.fault("crm.create", "error_429", delay_ms=3000)
    enquiry, op = approved_enquiry()
    assert tasks.execute_operation(str(op.pk)) == "throttled"
    # Held there while the page is read (the 3 s are not a race with this test).
    until = timezone.now() + timedelta(hours=1)
    Integration.objects.filter(name="crm").update(throttled_until=until)
    client.force_login(make_user("coordinator"))
    label = f"throttled by the CRM until {timezone.localtime(until):%H:%M:%S}"
    queue = client.get(reverse("recovery:queue")).content.decode()
    assert f"CRM: {label}." in queue
    assert "1 operation waits for that time" in queue
    assert "Nothing is waiting" in queue  # no failure row: the throttled write is not a failure
    item = client.get(reverse("recovery:enquiry", args=[enquiry.reference])).content.decode()
    assert f"Throttled by the CRM until {timezone.localtime(until):%H:%M:%S}" in item
    runbook = client.get(reverse("recovery:runbook", args=["throttled"]))
    assert runbook.status_code == 200


def test_an_admin_edit_of_the_limits_is_journalled(integrations, make_user, client):
    from django.urls import reverse

    crm = integrations["crm"]
    admin = make_user("admin", is_staff=True, is_superuser=True)
    client.force_login(admin)
    url = reverse("admin:ledger_integration_change", args=[crm.pk])
    form = client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update(max_requests_per_second="40", max_in_flight="8", owner="")
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    crm.refresh_from_db()
    assert (crm.max_requests_per_second, crm.max_in_flight) == (40.0, 8)
    entry = JournalEntry.objects.get(subject_id=str(crm.pk), action="ledger.integration.changed")
    assert entry.evidence["changes"]["max_requests_per_second"] == [None, 40.0]
    assert entry.actor_user == admin


def test_the_limits_are_seeded_from_the_environment_once(db, monkeypatch):
    from ledger.integrations import ensure_integrations

    monkeypatch.setenv("CRM_MAX_REQUESTS_PER_SECOND", "40")
    monkeypatch.setenv("CRM_MAX_IN_FLIGHT", "4")
    rows = ensure_integrations()
    assert (rows["crm"].max_requests_per_second, rows["crm"].max_in_flight) == (40.0, 4)
    assert (rows["notify"].max_requests_per_second, rows["notify"].max_in_flight) == (None, None)


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "forty"])
def test_a_limit_the_environment_gets_wrong_stops_the_seed(db, monkeypatch, value):
    from django.core.exceptions import ImproperlyConfigured

    from ledger.integrations import ensure_integrations

    monkeypatch.setenv("CRM_MAX_REQUESTS_PER_SECOND", value)
    with pytest.raises(ImproperlyConfigured, match="CRM_MAX_REQUESTS_PER_SECOND"):
        ensure_integrations()
    assert not Integration.objects.exists()
