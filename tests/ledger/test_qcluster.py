"""``manage.py qcluster`` (ledger's): the cluster stops when told, however it is told.

Real processes: a cluster on this test's database (master -> sentinel -> worker, pusher,
monitor). Each test signals it as something in the world would and waits for every one of its
processes to be gone. The waits only bound a failure (a process still running after them is
the defect: django-q2's own master, told by a group SIGTERM, waits for ever); nothing is timed.
"""

import os
import signal

import psutil
import pytest

from tests.conftest import wait_for_condition

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

GONE_WITHIN_S = 60


def _running(cluster) -> list[psutil.Process]:
    """The cluster's master and every process below it, once the cluster says it runs."""
    wait_for_condition(
        lambda: "running." in cluster.log(), timeout=120, message="the cluster to start"
    )
    master = psutil.Process(cluster.pid)
    # sentinel, 1 worker, pusher, monitor
    tree = wait_for_condition(
        lambda: (lambda t: t if len(t) >= 4 else None)(master.children(recursive=True)),
        timeout=60,
        message="the cluster's processes",
    )
    return [master, *tree]


def _assert_all_gone(processes, cluster):
    assert processes
    _gone, alive = psutil.wait_procs(processes, timeout=GONE_WITHIN_S)
    survivors = [(p.pid, p.status()) for p in alive if p.is_running()]
    assert not survivors, f"still running: {survivors}\n{cluster.log(4000)}"


def _sentinel(processes) -> psutil.Process:
    master = processes[0]
    (sentinel,) = [p for p in processes if p.ppid() == master.pid]
    return sentinel


def test_sigterm_to_the_whole_group_stops_the_cluster(start_cluster):
    """`kill -TERM -<pgid>`, as systemd's KillMode=control-group does: the sentinel and the
    workers die at once, and the master must not wait for them for ever."""
    cluster = start_cluster()
    processes = _running(cluster)

    os.killpg(cluster.pid, signal.SIGTERM)

    _assert_all_gone(processes, cluster)


def test_sigterm_to_the_master_stops_every_process_below_it(start_cluster):
    cluster = start_cluster()
    processes = _running(cluster)

    os.kill(cluster.pid, signal.SIGTERM)

    _assert_all_gone(processes, cluster)
    assert cluster.wait_exit() == 0
    assert "has stopped" in cluster.log() or "waiting for the monitor" in cluster.log()


def test_killing_the_master_takes_its_sentinel_and_workers(start_cluster):
    cluster = start_cluster()
    processes = _running(cluster)

    os.kill(cluster.pid, signal.SIGKILL)

    _assert_all_gone(processes, cluster)


def test_a_sentinel_that_does_not_stop_is_killed_after_the_grace(start_cluster):
    """A sentinel that never answers (stopped here with SIGSTOP; in life, a task that does not
    end) is killed once the grace (Q_TIMEOUT + 5 s, 13 s here) has passed, workers and all."""
    cluster = start_cluster()
    processes = _running(cluster)
    _sentinel(processes).send_signal(signal.SIGSTOP)

    os.kill(cluster.pid, signal.SIGTERM)

    _assert_all_gone(processes, cluster)
    assert "did not stop within" in cluster.log()


def test_a_second_signal_kills_the_cluster_without_waiting_for_the_grace(start_cluster):
    """With a grace far longer than the bound below (Q_TIMEOUT 600 s), a second SIGTERM ends
    a stop that hangs."""
    cluster = start_cluster(env={"Q_TIMEOUT": "600", "Q_RETRY": "700"})
    processes = _running(cluster)
    _sentinel(processes).send_signal(signal.SIGSTOP)
    os.kill(cluster.pid, signal.SIGTERM)
    wait_for_condition(
        lambda: "stopping the cluster" in cluster.log(), timeout=30, message="the first stop"
    )

    os.kill(cluster.pid, signal.SIGTERM)

    _assert_all_gone(processes, cluster)
    assert "second stop signal" in cluster.log()
