"""ledger.queueing: the task names and the ORM broker the workers take tasks from."""

import pytest
from django_q.models import OrmQ

from ledger.queueing import EXECUTE
from tests import wire


@pytest.mark.django_db
def test_the_orm_broker_hands_a_task_out_once_until_its_lock_passes(settings, monkeypatch):
    """ledger.queueing.OrmBroker (the configured broker): one statement locks and returns the
    oldest due task; a locked or delayed task is not handed out; a task whose lock has passed
    (its worker died) is handed out again; the acknowledgement deletes exactly its row."""
    from datetime import timedelta

    from django.utils import timezone
    from django_q.brokers import get_broker
    from django_q.conf import Conf
    from django_q.signing import SignedPackage

    from ledger.queueing import OrmBroker

    monkeypatch.setattr(Conf, "BULK", 1)  # one task a statement (the configured bulk: below)
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


_PAYLOADS: dict[int, str] = {}


def _payload(n):
    """Task n's signed package, the same text every time it is asked for (the signature holds
    the second it was made: two brokers' runs compare the payloads they hand out)."""
    from django_q.signing import SignedPackage

    if n not in _PAYLOADS:
        _PAYLOADS[n] = SignedPackage.dumps({"func": EXECUTE, "args": (f"op-{n}",), "kwargs": {}})
    return _PAYLOADS[n]


def _rows(key, now):
    """Three due tasks, one locked by a pusher, one delayed: (due IDs, every ID)."""
    from datetime import timedelta

    def task(n, lock):
        return OrmQ.objects.create(key=key, payload=_payload(n), lock=lock).pk

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


@pytest.mark.django_db
def test_one_dequeue_hands_out_a_task_for_each_worker(settings):
    """Q_CLUSTER bulk is the number of workers: one statement locks and hands out that many due
    tasks, oldest first, each locked until the retry time as a task alone is; the next due
    task waits for the next statement."""
    from datetime import timedelta

    from django.utils import timezone
    from django_q.conf import Conf
    from django_q.signing import SignedPackage

    from ledger.queueing import OrmBroker

    workers = settings.Q_CLUSTER["workers"]
    assert settings.Q_CLUSTER["bulk"] == Conf.BULK == workers > 1
    broker = OrmBroker(list_key=Conf.CLUSTER_NAME)
    now = timezone.now()
    payload = SignedPackage.dumps({"func": EXECUTE, "args": ("op",), "kwargs": {}})
    due = [
        OrmQ.objects.create(
            key=broker.list_key, payload=payload, lock=now - timedelta(seconds=9 - n)
        ).pk
        for n in range(workers + 1)
    ]
    assert [pk for pk, _ in broker.dequeue()] == due[:workers]
    retry = timedelta(seconds=settings.Q_CLUSTER["retry"])
    for pk in due[:workers]:
        assert OrmQ.objects.get(pk=pk).lock >= now + retry
    assert [pk for pk, _ in broker.dequeue()] == due[workers:]


def _queued(n):
    from django.utils import timezone
    from django_q.conf import Conf

    return [
        OrmQ.objects.create(key=Conf.CLUSTER_NAME, payload="x", lock=timezone.now()).pk
        for _ in range(n)
    ]


@pytest.mark.django_db(transaction=True)  # autocommit, as in the cluster's pusher and monitor
def test_the_broker_checks_its_connection_once_per_interval_not_before_each_statement():
    """A pusher and a monitor run one statement per task. With CONN_HEALTH_CHECKS, Django sends
    a ``SELECT 1`` before the first statement after each ``close_old_connections``, which
    django-q2's broker calls before every statement: OrmBroker checks once per CHECK_SECONDS,
    so acknowledgements in a row send their DELETEs and nothing else; once the interval has
    passed, the check (and its SELECT 1) comes back."""
    from django.conf import settings
    from django.db import connection
    from django_q.conf import Conf

    from ledger.queueing import OrmBroker

    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"]
    broker = OrmBroker(list_key=Conf.CLUSTER_NAME)
    broker.CHECK_SECONDS = 3600  # within the interval whatever this machine's speed
    first, *rest = _queued(4)
    broker.acknowledge(first)  # the first statement is checked
    with wire.sent(connection) as sent:
        for pk in rest:
            broker.acknowledge(pk)
    statements = sent.statements  # Django's health check is sent past its cursor wrappers
    assert len(statements) == 3 and all(s.startswith("DELETE FROM") for s in statements)
    assert not OrmQ.objects.exists()

    broker.CHECK_SECONDS = 0  # every statement past the interval: Django's check each time
    tasks = _queued(2)
    with wire.sent(connection) as sent:
        for pk in tasks:
            broker.acknowledge(pk)
    assert [s.split()[0] for s in sent.statements] == ["SELECT", "DELETE", "SELECT", "DELETE"]


@pytest.mark.django_db(transaction=True)
def test_the_broker_runs_its_statement_again_on_a_new_connection_when_the_server_dropped_it(
    caplog, monkeypatch
):
    """What the check before each statement gave, a broken connection replaced before it is
    used, still holds between checks: the server ends the broker's connection (as a restart
    does), and the next dequeue and acknowledgement fail once, are logged, and run on a new
    connection; a statement that fails on a working connection is not run again."""
    from django.db import OperationalError, connection, connections
    from django_q.conf import Conf

    from ledger.queueing import OrmBroker

    monkeypatch.setattr(Conf, "BULK", 2)
    broker = OrmBroker(list_key=Conf.CLUSTER_NAME)
    broker.CHECK_SECONDS = 3600
    task, other = _queued(2)

    def drop_the_brokers_connection():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        killer = connections.create_connection("default")
        try:
            with killer.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        finally:
            killer.close()
        return pid

    broker.acknowledge(0)  # checked once; the interval starts
    old = drop_the_brokers_connection()
    with caplog.at_level("WARNING", logger="ledger.queueing"):
        assert sorted(pk for pk, _ in broker.dequeue()) == [task, other]
    assert "connection was broken" in caplog.text
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != old
    drop_the_brokers_connection()
    broker.acknowledge(task)
    assert list(OrmQ.objects.values_list("pk", flat=True)) == [other]

    caplog.clear()
    with pytest.raises(OperationalError, match="canceling statement"):  # connection intact
        broker._run("SELECT pg_cancel_backend(pg_backend_pid())", [], fetch=True)
    assert "connection was broken" not in caplog.text
    assert list(OrmQ.objects.values_list("pk", flat=True)) == [other]
