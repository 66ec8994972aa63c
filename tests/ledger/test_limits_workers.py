"""Limits across real `qcluster` processes against the real, rate-limited sandbox.

Counted at the destination (the sandbox's per-second counts and records per reference) and in
the ledger: the limit holds across clusters, a 429 stops every worker for its Retry-After
without spending a retry budget, and a killed worker's in-flight slot comes back.
"""

import math
from datetime import timedelta

import pytest
from django.utils import timezone

from ledger.models import (
    InFlightSlot,
    Integration,
    JournalEntry,
    LimiterState,
    Operation,
    OperationState,
)
from tests.ledger.conftest import crm_records

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RATE = 2  # low enough that four workers would exceed it on a busy machine too


def confirmed_count(ops) -> int:
    return Operation.objects.filter(
        pk__in=[o.pk for o in ops], state=OperationState.CONFIRMED
    ).count()


def _attempts(ops):
    return [
        [(a.outcome, a.started_at.strftime("%S.%f")) for a in op.attempts.all()]
        for op in Operation.objects.filter(pk__in=[o.pk for o in ops])
    ]


def logs(*clusters) -> str:
    return "\n".join(c.log(2000) for c in clusters)


def test_two_clusters_never_exceed_the_rate_at_the_destination(
    approved_enquiry, integrations, sandbox, start_cluster, wait_for
):
    """R calls a second in Handover: 20 writes through two clusters of two workers. Every
    write is confirmed, each record exists once, and the calls arrived no faster than R a
    second, counted from the first moment a turn was free, at the destination.

    The count needs no timing allowance: no turn is handed out before ``opens`` (the limiter's
    row is set to it), the turns of every worker of both clusters are 1 / R apart at least,
    and a call arrives after it is sent, however busy the machine. So at the end of each of
    the sandbox's seconds, at most ceil((end - opens) * R) calls have arrived; two clusters
    that each kept their own pace would have sent twice that. The sandbox sets no limit of
    its own here: a 429 would slow the calls down and hide a limit that did not hold (the
    429 is the next test's)."""
    crm = integrations["crm"]
    crm.max_requests_per_second = RATE
    crm.save()
    ops = [approved_enquiry()[1] for _ in range(20)]
    opens = timezone.now() + timedelta(seconds=1)
    LimiterState.objects.update_or_create(integration=crm, defaults={"next_slot_at": opens})
    first = start_cluster(workers=2, name="first")
    second = start_cluster(workers=2, name="second")
    wait_for(
        lambda: confirmed_count(ops) == len(ops),
        timeout=180,
        interval=0.5,
        message=f"{len(ops)} confirmed (now {confirmed_count(ops)})\n{logs(first, second)}",
    )
    stats = sandbox.stats()
    per_second = sorted((int(s), n) for s, n in stats["per_second"]["crm.create"].items())
    assert per_second, stats
    arrived = 0
    for second_, calls in per_second:
        arrived += calls
        allowed = max(math.ceil((second_ + 1 - opens.timestamp()) * RATE), 0)
        assert arrived <= allowed, (second_, arrived, allowed, per_second)
    print(f"calls per second at the sandbox: {per_second}")
    assert stats["crm"]["total"] == len(ops)
    assert set(stats["crm"]["by_reference"].values()) == {1}
    assert stats["requests"]["crm.create"] == len(ops)
    # Both clusters sent: the limit held across processes, not within one.
    assert "execute" in first.log() and "execute" in second.log()


def test_a_429_stops_every_worker_for_its_retry_after_without_spending_budget(
    approved_enquiry, integrations, sandbox, start_cluster, wait_for
):
    """The first call is answered 429 with Retry-After: 3. With one call in flight at a time
    (a request already on the wire when a 429 is written cannot be recalled), no worker of
    either cluster calls the CRM again in the next 3 s; the operation's budget is untouched."""
    crm = integrations["crm"]
    crm.max_in_flight = 1
    crm.save()
    sandbox.fault("crm.create", "error_429", delay_ms=3000)
    ops = [approved_enquiry()[1] for _ in range(8)]
    first = start_cluster(workers=2, name="first")
    second = start_cluster(workers=2, name="second")
    wait_for(
        lambda: confirmed_count(ops) == len(ops),
        timeout=120,
        interval=0.5,
        message=f"{len(ops)} confirmed (now {confirmed_count(ops)})\n{logs(first, second)}",
    )
    stats = sandbox.stats()
    seconds = sorted((int(s), n) for s, n in stats["per_second"]["crm.create"].items())
    (refused_at, refused_calls), *after = seconds
    # The 429 was the first call anywhere; nothing else arrived in its second after it, nor
    # in the two whole seconds that follow (all inside the 3 s it named).
    assert refused_calls == 1, (seconds, stats["faults_fired"], _attempts(ops))
    assert after, seconds  # the other seven writes
    assert all(second >= refused_at + 3 for second, _n in after), seconds
    assert stats["faults_fired"]["crm.create"] == {"error_429": 1}
    assert stats["crm"]["total"] == len(ops)
    assert set(stats["crm"]["by_reference"].values()) == {1}

    throttled = Operation.objects.get(attempts__outcome="throttled")
    # On a loaded machine a worker can also find its turn taken at the last moment (the one
    # call in flight): that attempt is "not_sent", reached nobody and spent nothing.
    outcomes = [a.outcome for a in throttled.attempts.all()]
    assert [o for o in outcomes if o != "not_sent"] == ["throttled", "success"], outcomes
    assert throttled.budget_used == 1  # only the call that succeeded counted
    assert throttled.attention == ""
    assert JournalEntry.objects.filter(
        subject_id=str(crm.pk), action="ledger.integration.throttled"
    ).exists()
    row = Integration.objects.get(pk=crm.pk)
    assert row.throttle_reason.startswith("429")


def test_a_killed_worker_gives_its_in_flight_slot_back(
    approved_enquiry, integrations, sandbox, start_cluster, wait_for
):
    """One call in flight allowed. A worker is killed mid-call, holding the only slot: its
    lease gives it back, so the lost write is reconciled and later writes go out (a slot
    that never came back would stop every call to the CRM for good)."""
    crm = integrations["crm"]
    crm.max_in_flight = 1
    crm.save()
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=3000)
    enquiry, lost = approved_enquiry()
    crashed = start_cluster(failpoints=["during_call"], env={"CONNECTOR_TIMEOUT_SECONDS": "5"})
    crashed.wait_exit(timeout=60)
    assert "FAILPOINT during_call" in crashed.log()
    slot = InFlightSlot.objects.get(integration=crm)  # held by the dead worker
    assert slot.operation_id == lost.pk
    assert Operation.objects.get(pk=lost.pk).state == OperationState.SUBMITTED

    later = [approved_enquiry()[1] for _ in range(5)]
    restarted = start_cluster(workers=2, name="restarted")
    everything = [lost, *later]
    wait_for(
        lambda: confirmed_count(everything) == len(everything),
        timeout=120,
        interval=0.5,
        message=f"all confirmed (now {confirmed_count(everything)})\n{restarted.log(3000)}",
    )
    assert not InFlightSlot.objects.filter(pk=slot.pk).exists()
    assert InFlightSlot.objects.filter(integration=crm).count() == 0  # none left behind
    assert crm_records(sandbox, enquiry.reference) == 1
    assert crm_records(sandbox) == len(everything)
    assert sandbox.stats()["requests"]["crm.create"] == len(everything)  # lost one: looked up
