"""E-mail is retried as e-mail is (ledger.execution.retrying): against a real SMTP relay
(harness.mailserver) that is down, with the clock moved by time-machine instead of waiting real
hours. Counted at the relay by Message-ID AND in the ledger."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from ledger import notices
from ledger.models import Attempt, JournalEntry, Operation, OperationState
from ledger.proposals import acknowledgement_payload
from ledger.services import LEDGER, propose
from recovery import timefmt
from recovery.ownership import item_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HOUR = 3600


@pytest.fixture
def email_schedule(email_integration, settings):
    """E-mail's real schedule: 1 minute, doubling to an hour, for 24 hours."""
    settings.EMAIL_RETRY_FIRST_SECONDS = 60.0
    settings.EMAIL_RETRY_MAX_SECONDS = 3600.0
    settings.EMAIL_RETRY_HOURS = 24.0
    return email_integration


def acknowledge(enquiry):
    with transaction.atomic():
        op, _ = propose(
            enquiry,
            "notify.send",
            acknowledgement_payload(enquiry),
            revision=1,
            detail=notices.ACKNOWLEDGEMENT,
            actor=LEDGER,
            approve=True,
        )
    return op


def calls(op) -> int:
    return Attempt.objects.filter(operation=op, kind="call").count()


def test_an_hour_without_the_relay_sends_every_message_once_when_it_is_back(
    email_schedule, mail, make_enquiry, make_user, run_queue, client
):
    mail.fault("refuse")
    with time_machine.travel(timezone.now(), tick=True) as clock:
        ops = [acknowledge(make_enquiry(email=f"resident{i}@example.org")) for i in range(5)]
        run_queue(until=lambda: all(calls(op) == 1 for op in ops))

        # Waiting, not failed: the next try is stored and the item page says when it is.
        op = Operation.objects.get(pk=ops[0].pk)
        assert op.state == OperationState.APPROVED and op.last_error_class == "transient"
        assert op.next_attempt_at - op.last_attempted_at >= timedelta(seconds=60)
        client.force_login(make_user("coordinator"))
        page = client.get(f"/console/enquiries/{op.enquiry.reference}/").content.decode()
        assert f"Next try at {timefmt.local(op.next_attempt_at, date=False)}" in page
        assert "then it comes to a person" in page

        down_for = 0
        while down_for < HOUR:
            clock.shift(300)
            down_for += 300
            run_queue()
            states = set(
                Operation.objects.filter(pk__in=[o.pk for o in ops]).values_list("state", flat=True)
            )
            assert states == {OperationState.APPROVED}  # never failed, never a person's
        tried = [calls(op) for op in ops]
        assert all(5 <= n <= 8 for n in tried), tried  # growing waits: not one try a minute
        assert mail.stats()["received"] == 0

        mail.clear_faults()
        for _ in range(24):  # at most two hours more: the longest wait is one hour
            clock.shift(300)
            run_queue()
            if all(Operation.objects.get(pk=op.pk).state == OperationState.CONFIRMED for op in ops):
                break

    stats = mail.stats()
    assert stats["received"] == len(ops)
    assert stats["by_message_id"] == {notices.message_id(op.idempotency_key): 1 for op in ops}
    # Nobody was involved: every change by the system, none ever failed or unknown.
    rows = JournalEntry.objects.filter(subject_id__in=[str(op.pk) for op in ops])
    assert rows.exists()
    assert {row.actor.split(":")[0] for row in rows} == {"system"}
    assert not rows.filter(to_state__in=["failed", "unknown"]).exists()
    assert not Operation.objects.filter(pk__in=[o.pk for o in ops]).exclude(owner=None).exists()


def test_a_relay_down_for_the_whole_window_leaves_the_message_to_a_person(
    email_schedule, mail, make_enquiry, run_queue
):
    from recovery.queue import all_rows

    mail.fault("refuse")
    with time_machine.travel(timezone.now(), tick=True) as clock:
        op = acknowledge(make_enquiry())
        run_queue(until=lambda: calls(op) == 1)
        for _ in range(100):
            op.refresh_from_db()
            if op.state != OperationState.APPROVED:
                break
            clock.move_to(op.next_attempt_at + timedelta(seconds=1))
            run_queue(
                until=lambda: (
                    Operation.objects.get(pk=op.pk).next_attempt_at is None
                    or Operation.objects.get(pk=op.pk).next_attempt_at > timezone.now()
                )
            )

    op.refresh_from_db()
    assert op.state == OperationState.FAILED
    assert op.attention == "retry_budget_exhausted" and op.last_error_class == "transient"
    starts = list(
        Attempt.objects.filter(operation=op).order_by("number").values_list("started_at", flat=True)
    )
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
    # 1 minute, doubling, never more than an hour apart; tried for the whole 24 hours.
    assert gaps[0] >= 60 and all(g <= HOUR + 60 for g in gaps)
    assert all(b >= a - 2 for a, b in itertools.pairwise(gaps[:7]))  # growing
    assert 24 * HOUR <= (starts[-1] - starts[0]).total_seconds() <= 24 * HOUR + 600
    assert len(starts) < 40  # about thirty tries in a day, not thousands
    failed = JournalEntry.objects.filter(subject_id=str(op.pk), to_state="failed").get()
    assert "24 hours of trying" in failed.reason
    # A person has it: in the queue, owned (its queue's owner, or the admins, the relay's
    # owner among them).
    assert [r["q_queue"] for r in all_rows() if str(r["q_key"]) == str(op.pk)] == ["failed"]
    assert email_schedule.owner in item_owner(op).people()
    assert mail.stats()["received"] == 0


def test_an_operators_notice_is_retried_the_same_way_and_sent_once(
    email_schedule, mail, make_user, make_enquiry, integrations, run_queue, client
):
    from ledger.models import Integration
    from ledger.services import reassign_operation
    from recovery import notices as operator_notices
    from tests.ledger.factories import make_operation

    admin = make_user("admin", username="boss")
    casey = make_user("coordinator", username="casey", email="casey@example.org")
    failed = make_operation(
        make_enquiry(), "failed", integration=Integration.objects.get(name="crm")
    )
    reassign_operation(failed.pk, actor=admin, reason="yours", owner=casey)
    mail.fault("refuse")
    with time_machine.travel(timezone.now(), tick=True) as clock:
        operator_notices.run()
        [digest] = Operation.objects.filter(
            enquiry__isnull=True, idempotency_key__startswith=f"operator:{casey.pk}:"
        )
        run_queue(until=lambda: calls(digest) == 1)
        digest.refresh_from_db()
        assert digest.state == OperationState.APPROVED and digest.next_attempt_at
        client.force_login(admin)
        page = client.get(f"/console/operations/{digest.pk}/").content.decode()
        assert f"Next try at {timefmt.local(digest.next_attempt_at, date=False)}" in page
        for _ in range(3):  # twenty minutes down
            clock.shift(400)
            run_queue()
        mail.clear_faults()
        for _ in range(12):
            clock.shift(600)
            run_queue()
            digest.refresh_from_db()
            if digest.state != OperationState.APPROVED:
                break
    assert digest.state == OperationState.CONFIRMED
    assert mail.stats()["by_message_id"] == {notices.message_id(digest.idempotency_key): 1}
