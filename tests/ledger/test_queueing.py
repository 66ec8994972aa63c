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


def _rows(key, now):
    """Three due tasks, one locked by a pusher, one delayed: (due IDs, every ID)."""
    from datetime import timedelta

    from django_q.signing import SignedPackage

    def task(n, lock):
        payload = SignedPackage.dumps({"func": EXECUTE, "args": (f"op-{n}",), "kwargs": {}})
        return OrmQ.objects.create(key=key, payload=payload, lock=lock).pk

    due = [task(n, now - timedelta(seconds=10 - n)) for n in range(3)]
    others = [task(3, now + timedelta(seconds=30)), task(4, now + timedelta(minutes=5))]
    OrmQ.objects.create(key="another-cluster", payload="x", lock=now - timedelta(seconds=20))
    return due, due + others


@pytest.mark.django_db
def test_the_orm_broker_hands_out_and_acknowledges_as_django_q2s_own(settings, monkeypatch):
    """What OrmBroker relies on, so that a django-q2 upgrade that changes it fails here: its
    dequeue and acknowledge replace django-q2's ORM broker's, with the same signatures and the
    same results on the same rows (the due tasks of its cluster, each locked until the retry
    time; the acknowledged row deleted)."""
    import inspect
    from datetime import timedelta

    from django.utils import timezone
    from django_q.brokers import Broker
    from django_q.brokers.orm import ORM
    from django_q.conf import Conf

    from ledger.queueing import OrmBroker

    for name in ("dequeue", "acknowledge"):
        assert inspect.signature(getattr(OrmBroker, name)) == inspect.signature(
            getattr(ORM, name)
        ), name
        assert inspect.signature(getattr(ORM, name)) == inspect.signature(getattr(Broker, name))
    monkeypatch.setattr(Conf, "BULK", 10)
    monkeypatch.setattr(Conf, "POLL", 0)
    retry = timedelta(seconds=settings.Q_CLUSTER["retry"])
    handed_out = {}
    for broker_class in (ORM, OrmBroker):
        OrmQ.objects.all().delete()
        now = timezone.now()
        broker = broker_class(list_key=Conf.CLUSTER_NAME)
        due, every = _rows(broker.list_key, now)
        taken = broker.dequeue()
        handed_out[broker_class] = sorted((every.index(pk), payload) for pk, payload in taken)
        assert sorted(pk for pk, _ in taken) == due, broker_class
        for pk in due:
            assert OrmQ.objects.get(pk=pk).lock >= now + retry, broker_class
        assert not broker.dequeue(), broker_class  # all locked or not yet due
        broker.acknowledge(due[1])
        assert not OrmQ.objects.filter(pk=due[1]).exists(), broker_class
        assert OrmQ.objects.count() == len(every), broker_class  # the others' row stays
    assert handed_out[ORM] == handed_out[OrmBroker]


@pytest.mark.django_db
def test_django_q2s_pusher_and_monitor_drive_the_orm_broker(monkeypatch):
    """django-q2's own pusher takes the task through OrmBroker.dequeue and its monitor
    acknowledges it through OrmBroker.acknowledge, as the cluster does."""
    import queue
    import threading

    from django_q.conf import Conf
    from django_q.monitor import monitor
    from django_q.pusher import pusher
    from django_q.signing import SignedPackage

    from ledger.queueing import OrmBroker

    monkeypatch.setattr(Conf, "POLL", 0)
    broker = OrmBroker(list_key=Conf.CLUSTER_NAME)
    task_id = broker.enqueue(
        SignedPackage.dumps(
            {"id": "t1", "name": "t1", "func": EXECUTE, "args": ("op-1",), "kwargs": {}}
        )
    )
    tasks: queue.Queue = queue.Queue()
    once = threading.Event()
    once.set()  # the pusher stops after one pass
    pusher(tasks, once, broker=broker)
    task = tasks.get_nowait()
    assert task["ack_id"] == task_id and task["func"] == EXECUTE and task["args"] == ("op-1",)
    assert OrmQ.objects.filter(pk=task_id).exists()  # handed out, not yet acknowledged

    results: queue.Queue = queue.Queue()
    results.put({**task, "success": True, "result": "ok", "started": None, "stopped": None})
    results.put("STOP")
    monitor(results, broker=broker)
    assert not OrmQ.objects.filter(pk=task_id).exists()
