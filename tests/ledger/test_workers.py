"""Real `qcluster` processes on the test database against the real sandbox: crashes at each
failpoint, duplicate deliveries between clusters, a SECRET_KEY rotation.

Each case asserts the ledger's state AND the destination's own record count.
"""

import os
import subprocess
import sys

import pytest

from intake.models import EnquiryState
from ledger.models import Operation, OperationState
from tests.ledger.conftest import PROJECT_ROOT, child_database_url, crm_records

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def states(*ops):
    return [Operation.objects.get(pk=op.pk).state for op in ops]


def confirmed(op):
    return lambda: Operation.objects.get(pk=op.pk).state == OperationState.CONFIRMED


def test_a_cluster_delivers_an_approved_enquiry(approved_enquiry, sandbox, start_cluster, wait_for):
    enquiry, op = approved_enquiry()
    cluster = start_cluster()
    wait_for(confirmed(op), timeout=60, message=f"cluster confirms the write\n{cluster.log()}")
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert crm_records(sandbox, enquiry.reference) == 1


@pytest.mark.parametrize(
    ("failpoint", "records_at_crash"),
    [
        # Killed mid-call: the sandbox commits at once and answers 3s later.
        ("during_call", 1),
        # Killed after the destination answered 2xx, before the ledger recorded it.
        ("after_call_succeeded", 1),
    ],
)
def test_a_worker_killed_around_the_call_leaves_one_record_after_restart(
    approved_enquiry, sandbox, start_cluster, wait_for, failpoint, records_at_crash
):
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=3000)
    if failpoint == "after_call_succeeded":
        sandbox.clear_faults()
    enquiry, op = approved_enquiry()
    crashed = start_cluster(failpoints=[failpoint], env={"CONNECTOR_TIMEOUT_SECONDS": "5"})
    crashed.wait_exit(timeout=60)
    assert f"FAILPOINT {failpoint}" in crashed.log()
    # What the crash left: the ledger says the call was in flight; the record exists.
    op.refresh_from_db()
    assert op.state == OperationState.SUBMITTED
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.SUBMITTED
    assert crm_records(sandbox, enquiry.reference) == records_at_crash

    restarted = start_cluster(name="restarted")
    wait_for(confirmed(op), timeout=60, message=f"reconciled on restart\n{restarted.log()}")
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert crm_records(sandbox, enquiry.reference) == 1
    assert sandbox.stats()["requests"]["crm.create"] == 1  # found by lookup, never re-sent
    assert [a.outcome for a in op.attempts.order_by("number")] == ["lost", "found"]


def test_a_failpoint_armed_for_one_operation_lets_other_work_through(
    approved_enquiry, make_enquiry, reviewer, sandbox, start_cluster, wait_for
):
    """Armed with the write's idempotency key (known before approval), the failpoint passes
    over another enquiry's write the same cluster delivers first, and crashes on its own."""
    other, other_op = approved_enquiry()
    target = make_enquiry()
    key = Operation.make_key(target.pk, "crm.create_enquiry", target.current_revision)
    cluster = start_cluster(failpoints=[f"after_call_succeeded@{key}"])
    wait_for(confirmed(other_op), timeout=60, message=f"the other write\n{cluster.log()}")
    assert cluster.running and "FAILPOINT" not in cluster.log()

    from ledger.services import approve_revision

    op = approve_revision(target.pk, actor=reviewer, reason="checked")
    assert op.idempotency_key == key

    cluster.wait_exit(timeout=60)
    assert "FAILPOINT after_call_succeeded" in cluster.log()
    op.refresh_from_db()
    assert op.state == OperationState.SUBMITTED  # ours, in flight when the process group died
    assert crm_records(sandbox, target.reference) == 1
    assert crm_records(sandbox, other.reference) == 1


def test_a_crash_right_after_approval_loses_nothing(
    make_enquiry, reviewer, integrations, sandbox, start_cluster, wait_for
):
    """The approving process dies the moment its transaction commits: the task is durable."""
    enquiry = make_enquiry()
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "HANDOVER_FAILPOINTS": "after_approval",
    }
    code = (
        "from django.contrib.auth import get_user_model;"
        "from ledger.services import approve_revision;"
        f"u = get_user_model().objects.get(pk={reviewer.pk});"
        f"approve_revision('{enquiry.pk}', actor=u, reason='ok');"
        "print('survived')"
    )
    approving = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )
    assert approving.returncode != 0 and "survived" not in approving.stdout, approving.stderr
    assert "FAILPOINT after_approval" in approving.stderr
    op = Operation.objects.get(enquiry=enquiry, action="crm.create_enquiry")
    assert op.state == OperationState.APPROVED
    assert crm_records(sandbox) == 0  # the call never happened
    cluster = start_cluster()
    wait_for(confirmed(op), timeout=60, message=f"the queued task ran\n{cluster.log()}")
    assert crm_records(sandbox, enquiry.reference) == 1


def test_a_worker_killed_after_the_model_returns_keeps_the_suggestion(
    make_enquiry, integrations, sandbox, start_cluster, wait_for
):
    from django.db import transaction

    from ledger.services import propose_receipt_work

    enquiry = make_enquiry(email="")
    with transaction.atomic():
        [op] = propose_receipt_work(enquiry)
    crashed = start_cluster(failpoints=["after_model_returns"])
    crashed.wait_exit(timeout=60)
    assert Operation.objects.get(pk=op.pk).state == OperationState.SUBMITTED
    assert enquiry.suggestions.count() == 1  # stored by intake before the crash
    restarted = start_cluster(name="restarted")
    wait_for(confirmed(op), timeout=60, message=f"reconciled on restart\n{restarted.log()}")
    assert enquiry.suggestions.count() == 1  # found, not asked again


def test_two_clusters_with_a_short_retry_write_every_record_exactly_once(
    approved_enquiry, integrations, sandbox, start_cluster, wait_for
):
    """retry (2s) shorter than the call (the first one takes 6s): the broker hands the task
    out again while a worker is still in the call, and keeps doing so for whatever sits in a
    cluster's local queue longer than 2s. Only the ledger's claim stands between that and a
    duplicate: the sandbox ignores idempotency keys here."""
    sandbox.capabilities(idempotency_key=False)
    integrations["crm"].supports_idempotency_key = False
    integrations["crm"].timeout_seconds = 8.0  # the slow call succeeds, slowly
    integrations["crm"].save()
    sandbox.fault("crm.create", "latency", count=1, delay_ms=6000)
    # Deliberately misordered timeouts (the system check refuses them, hence --skip-checks).
    env = {"Q_RETRY": "2", "Q_TIMEOUT": "10", "CONNECTOR_TIMEOUT_SECONDS": "8"}
    _, slow = approved_enquiry()
    first = start_cluster(workers=2, env=env, skip_checks=True, name="first")
    wait_for(
        lambda: Operation.objects.get(pk=slow.pk).state == OperationState.SUBMITTED,
        timeout=60,
        message=f"the first call in flight\n{first.log()[-2000:]}",
    )
    ops = [slow] + [approved_enquiry()[1] for _ in range(199)]
    second = start_cluster(workers=2, env=env, skip_checks=True, name="second")

    def done():
        return Operation.objects.filter(
            pk__in=[o.pk for o in ops], state=OperationState.CONFIRMED
        ).count()

    wait_for(
        lambda: done() == 200,
        timeout=180,
        interval=0.5,
        message=f"200 confirmed (now {done()})\n{first.log()[-2000:]}\n{second.log()[-2000:]}",
    )
    stats = sandbox.stats()
    assert stats["crm"]["total"] == 200
    assert set(stats["crm"]["by_reference"].values()) == {1}
    assert stats["requests"]["crm.create"] == 200  # no task ever sent a second POST
    # The slow task's lease at the broker ran out mid-call: it was delivered again and the
    # second delivery found nothing to claim.
    redelivered = (first.log() + second.log()).count(": nothing to claim")
    assert redelivered >= 1
    print(f"duplicate task deliveries that found nothing to claim: {redelivered}")


def test_rotating_secret_key_with_tasks_queued_loses_no_operation(
    approved_enquiry, sandbox, start_cluster, wait_for
):
    ops = [approved_enquiry()[1] for _ in range(5)]  # queued, signed with this run's key
    cluster = start_cluster(env={"SECRET_KEY": "rotated-" + "k" * 50})
    wait_for(
        lambda: all(state == OperationState.CONFIRMED for state in states(*ops)),
        timeout=90,
        message=f"every operation delivered after the rotation\n{cluster.log()[-3000:]}",
    )
    assert crm_records(sandbox) == 5
    # The old-key tasks were dropped unread; the sweeper at worker start put them back.
    assert "5 execution(s) re-enqueued" in cluster.log()
