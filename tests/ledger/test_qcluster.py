"""``manage.py qcluster`` (ledger's): the cluster stops when told, however it is told.

Real processes: a cluster on this test's database (master -> sentinel -> worker, pusher,
monitor). Each test signals it as something in the world would and waits for every one of its
processes to be gone. The waits only bound a failure (a process still running after them is
the defect: django-q2's own master, told by a group SIGTERM, waits for ever); nothing is timed.
The last tests drive the stop threads of ``StoppableCluster`` with a real forked child in
place of the sentinel.
"""

import logging
import multiprocessing
import os
import signal
import time

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


# --- the stop threads, with a real child in place of the sentinel ------------------------------


@pytest.fixture
def stop_threads():
    """stop_threads(target, grace) -> StoppableCluster whose sentinel is a started fork of
    ``target``; the signal handlers the cluster installs are put back afterwards."""
    from ledger.management.commands.qcluster import StoppableCluster

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    children = []

    def make(target, grace):
        cluster = StoppableCluster(grace=grace)
        cluster.sentinel = multiprocessing.get_context("fork").Process(target=target)
        cluster.sentinel.start()
        children.append(cluster.sentinel)
        return cluster

    yield make
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    for child in children:
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(child.pid, 0)
        except ChildProcessError:
            pass


def _exit_at_once():
    os._exit(0)


def _never_exit():
    while True:
        time.sleep(60)


def test_a_sentinel_reaped_by_the_main_thread_has_stopped(stop_threads, caplog):
    """The race of the flaky runall stop: the main thread (multiprocessing's exit handler,
    joining the sentinel) reaps the sentinel before it records the exit status, and the stop
    thread, which had read ``exitcode`` after its own join, got ECHILD and None: it logged "did
    not stop within 65 s" 0.4 s after the stop began and signalled a reaped pid. Here the
    sentinel has exited and been reaped, its status not yet recorded in the Process."""
    cluster = stop_threads(_exit_at_once, grace=60)
    os.waitpid(cluster.sentinel.pid, 0)  # the main thread's waitpid, its status not yet recorded

    with caplog.at_level(logging.WARNING, logger="handover.cluster"):
        cluster._bound_stop()

    assert "did not stop" not in caplog.text


def test_the_stop_threads_leave_the_sentinel_to_the_main_thread_to_reap(stop_threads):
    """Neither stop thread reaps the sentinel (a second reaper is what the race needs): once
    they have seen it exit, its exit status is still there for the main thread."""
    cluster = stop_threads(_exit_at_once, grace=60)
    cluster.stop_event = multiprocessing.get_context("fork").Event()

    cluster._bound_stop()
    cluster._request_stop()
    cluster.kill_sentinel()

    # Its exit status is still there to reap (ChildProcessError if a stop thread had reaped it).
    # Blocking: the pipe closes as the child exits, a moment before it can be reaped.
    _pid, status = os.waitpid(cluster.sentinel.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not cluster.stop_event.is_set()  # it had exited: nothing to tell it


def test_a_sentinel_that_never_exits_is_killed_at_the_grace(stop_threads, caplog):
    cluster = stop_threads(_never_exit, grace=0.2)

    with caplog.at_level(logging.WARNING, logger="handover.cluster"):
        cluster._bound_stop()

    _pid, status = os.waitpid(cluster.sentinel.pid, 0)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
    assert "did not stop within" in caplog.text
