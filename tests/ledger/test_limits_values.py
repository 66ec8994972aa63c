"""What an admin or a destination can say to ledger.limits that once broke a worker: a rate
of 1e-300 requests per second (an OverflowError in every call, recorded as uncertain), and
``Retry-After: 0`` (57 POSTs in 12 s for one operation, with no end)."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse
from django.utils import timezone

from ledger import limits, rates, tasks
from ledger.models import Integration, Operation, OperationState
from tests.ledger.oddserver import OddServer

BAD_RATES = ["1e-12", "1e-300", "5e-324", "٣", "1_000", "inf", "nan", "-1", "0.001", "20000"]


@pytest.mark.parametrize("text", [*BAD_RATES, "²", "1e3", " 2 5", "0x10", "1.2.3"])
def test_the_rate_rule_refuses_what_float_would_take(text):
    with pytest.raises(ValueError, match="calls per second"):
        rates.parse_rate(text)


@pytest.mark.parametrize(
    ("text", "rate"),
    [("25", 25.0), (" 0.5 ", 0.5), ("0.01", 0.01), ("10000", 10000.0), ("0", None), ("", None)],
)
def test_the_rate_rule_reads_plain_decimals(text, rate):
    assert rates.parse_rate(text) == rate


@pytest.mark.parametrize("value", BAD_RATES)
def test_the_environment_follows_the_same_rule(db, monkeypatch, value):
    from ledger.integrations import ensure_integrations

    monkeypatch.setenv("CRM_MAX_REQUESTS_PER_SECOND", value)
    with pytest.raises(ImproperlyConfigured, match="CRM_MAX_REQUESTS_PER_SECOND"):
        ensure_integrations()
    assert not Integration.objects.exists()


@pytest.mark.parametrize("rate", ["1e-300", "٣", "1_000"])
def test_the_admin_follows_the_same_rule(integrations, make_user, client, rate):
    crm = integrations["crm"]
    client.force_login(make_user("admin", is_staff=True, is_superuser=True))
    url = reverse("admin:ledger_integration_change", args=[crm.pk])
    form = client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update(max_requests_per_second=rate, owner="")
    response = client.post(url, data)
    assert response.status_code == 200  # the form again, with the error
    assert "calls per second" in response.content.decode()
    crm.refresh_from_db()
    assert crm.max_requests_per_second is None


@pytest.mark.parametrize("stored", [1e-12, 1e-300, 5e-324])
def test_a_rate_stored_before_the_rule_sends_and_is_never_uncertain(
    approved_enquiry, sandbox, integrations, stored
):
    # A row saved before the rule existed: read within it, so the call goes out and is
    # confirmed (it raised OverflowError, and the write was recorded uncertain unsent).
    Integration.objects.filter(name="crm").update(max_requests_per_second=stored)
    enquiry, op = approved_enquiry()
    assert tasks.execute_operation(str(op.pk)) == "confirmed"
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    assert sandbox.stats()["crm"]["by_reference"][enquiry.reference] == 1
    assert limits.interval_for(stored) == pytest.approx((1 + 0.05) / rates.RATE_MIN)


# --- Retry-After: 0, and a destination that never stops saying "wait" -------------------------


@pytest.mark.parametrize("value", ["0", "Thu, 02 Jan 2020 13:59:00 GMT"])
def test_no_retry_after_waits_less_than_the_floor(value, settings):
    settings.LIMITS_MIN_RETRY_AFTER = 2.0
    assert limits.parse_retry_after(value) == 2.0


def test_a_destination_answering_retry_after_0_for_ever_goes_to_a_person(
    approved_enquiry, integrations, settings
):
    settings.LIMITS_MAX_THROTTLED_IN_A_ROW = 3
    with OddServer(429, b'{"error": "slow down"}', {"Retry-After": "0"}) as odd:
        Integration.objects.filter(name="crm").update(base_url=odd.url)
        _enquiry, op = approved_enquiry()
        outcomes = []
        for _ in range(10):
            before = timezone.now()
            outcomes.append(tasks.execute_operation(str(op.pk)))
            op.refresh_from_db()
            if op.state != OperationState.APPROVED:
                break
            # The floor: "0" still waits a second, for the whole integration.
            crm = Integration.objects.get(name="crm")
            assert crm.throttled_until >= before + timedelta(seconds=1)
            # The wait is over (moved, not slept).
            Integration.objects.filter(pk=crm.pk).update(throttled_until=None)
            Operation.objects.filter(pk=op.pk).update(next_attempt_at=None)
        assert outcomes == ["throttled", "throttled", "failed (throttled too often)"]
        assert len(odd.requests) == 3  # not one more POST
    assert (op.state, op.attention) == (OperationState.FAILED, "throttled_too_often")
    assert op.budget_used == 0  # a 429 is not a failure of the destination
    assert [a.outcome for a in op.attempts.all()] == ["throttled"] * 3

    from recovery.explain import runbook_for_operation
    from recovery.queue.sources import all_rows

    assert next(r for r in all_rows() if r["q_key"] == str(op.pk))["q_queue"] == "failed"
    assert runbook_for_operation(op) == "throttled"
