"""ledger.queueing: the task names and the ORM broker the workers take tasks from."""

import pytest
from django_q.models import OrmQ

from ledger.queueing import EXECUTE


@pytest.mark.django_db
def test_the_orm_broker_hands_a_task_out_once_until_its_lock_passes(settings):
    """ledger.queueing.OrmBroker (the configured broker): one statement locks and returns the
    oldest due task; a locked or delayed task is not handed out; a task whose lock has passed
    (its worker died) is handed out again; the acknowledgement deletes exactly its row."""
    from datetime import timedelta

    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.signing import SignedPackage

    from ledger.queueing import OrmBroker

    broker = get_broker()
    assert isinstance(broker, OrmBroker)
    now = timezone.now()

    def task(n, lock):
        payload = SignedPackage.dumps({"func": EXECUTE, "args": (f"op-{n}",), "kwargs": {}})
        return OrmQ.objects.create(key=broker.list_key, payload=payload, lock=lock).pk

    delayed = task(0, now + timedelta(minutes=5))
    first = task(1, now - timedelta(seconds=2))
    second = task(2, now - timedelta(seconds=1))

    taken = broker.dequeue()
    assert [pk for pk, _ in taken] == [first]  # bulk 1: the oldest due task
    assert SignedPackage.loads(taken[0][1])["args"] == ("op-1",)
    retry = timedelta(seconds=settings.Q_CLUSTER["retry"])
    assert OrmQ.objects.get(pk=first).lock > now + retry - timedelta(seconds=5)
    assert [pk for pk, _ in broker.dequeue()] == [second]
    assert broker.dequeue() is None  # both locked, the delayed one not yet due

    OrmQ.objects.filter(pk=second).update(lock=now - timedelta(seconds=1))  # its lock passed
    assert [pk for pk, _ in broker.dequeue()] == [second]
    broker.acknowledge(first)
    assert sorted(OrmQ.objects.values_list("pk", flat=True)) == sorted([delayed, second])
