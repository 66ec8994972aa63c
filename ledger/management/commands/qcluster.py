"""``manage.py qcluster``: django-q2's cluster, made to stop when told, however it is told.

django-q2's master handles SIGTERM by setting the sentinel's stop event and joining it. The
sentinel spends its life waiting on that event (its guard loop, ``stop_event.wait(0.5)``), and
``multiprocessing.Event.set()`` waits, with no timeout, for every process registered as waiting
to say it woke up. When SIGTERM reaches the whole process group (``kill -TERM -<pgid>``,
systemd's default ``KillMode=control-group``, the old `make run`), the sentinel and the workers
die at once (their SIGTERM is the default action) while the sentinel is registered as waiting:
the master's handler then waits in ``Event.set()`` for a process that no longer exists, a futex
wait that never ends. Each further SIGTERM runs the same handler nested, which finds the
sentinel dead and returns into the same wait: the master outlives its workers and ignores
SIGTERM until it is killed (``tests/ledger/test_qcluster.py`` reproduces it).

This command runs the same cluster with three changes (and names its database connections
``handover-qcluster``, ledger.worker, so a drill can see that live workers share its database):

- the signal handler never blocks: it sets the stop event from a daemon thread, so the main
  thread (which only waits for the sentinel to exit) ends as soon as the sentinel is gone,
  whoever stopped it;
- a stop is bounded: if the sentinel has not exited ``STOP_GRACE_SECONDS`` after the first
  signal (a task still running; the longest one may take is ``Q_TIMEOUT``), or at a second
  signal, the sentinel is killed;
- an orphan's stop is short: a stop signal that finds the master's parent gone (its
  supervisor, such as ``runall``, died, even by SIGKILL, and PR_SET_PDEATHSIG sent the
  signal) gives the tasks in hand ``ORPHAN_GRACE_SECONDS``, not ``Q_TIMEOUT`` + 5 s: nothing
  is left to restart or watch the cluster, and the ledger reconciles a call cut short (the
  sweeper, as after any killed worker);
- every process forked below the master is killed when its parent dies (Linux
  PR_SET_PDEATHSIG), so killing the master, or killing the sentinel, takes its workers with it.

Only the main thread reaps the sentinel (``waitpid``: multiprocessing's exit handler joins it).
The stop threads watch it without reaping (``has_exited``): ``Process.join()``, ``is_alive()``
and ``exitcode`` each call ``waitpid``, and of two threads reaping one child the one that loses
gets ECHILD, which multiprocessing reads as "still running" (``exitcode`` None) until the winner
has recorded the status; a stop thread reading it so would call a sentinel that had stopped at
once "did not stop" and signal a pid that may already be another process's.
"""

import logging
import os
import signal
import threading
from multiprocessing.connection import wait

from django.conf import settings
from django.core.management.base import CommandError
from django_q.cluster import Cluster
from django_q.conf import Conf
from django_q.management.commands import qcluster

from config import lifetime
from ledger import worker

log = logging.getLogger("handover.cluster")

# A graceful stop lets the tasks in hand finish (at most Q_TIMEOUT, then django-q2 kills them
# itself); beyond that, nothing is waited for.
STOP_GRACE_SECONDS = Conf.TIMEOUT + 5 if Conf.TIMEOUT else 65
# A stop once the process that started the master is gone (see the module).
ORPHAN_GRACE_SECONDS = 3


def die_with_parent() -> None:
    """Fork handlers: a forked child is sent SIGKILL when the process that forked it dies.

    The parent's pid is taken before the fork, so a child whose parent died during the fork
    (before the request could be made) notices and is killed too (config.lifetime).
    """
    parent = {}

    def before():
        parent["pid"] = os.getpid()

    def after_in_child():
        lifetime.die_with_parent(signal.SIGKILL, parent.get("pid"))

    os.register_at_fork(before=before, after_in_child=after_in_child)


def has_exited(process, timeout: float = 0) -> bool:
    """Whether a started child ``process`` has exited (waiting up to ``timeout`` s), without
    reaping it: the pipe multiprocessing keeps to the child (``Process.sentinel``) becomes
    readable once the child has exited, and reading that leaves its exit status to the one
    thread that reaps it (see the module's docstring). The pipe is inherited by what the child
    forks, so for the cluster's sentinel this means it and its workers have all exited.
    """
    return bool(wait([process.sentinel], timeout))


def _started(process) -> bool:
    return process is not None and process.pid is not None


class StoppableCluster(Cluster):
    """django-q2's ``Cluster`` whose signal handler neither blocks nor waits unbounded."""

    def __init__(self, *args, grace: float = STOP_GRACE_SECONDS, **kwargs):
        super().__init__(*args, **kwargs)
        self.grace = grace
        self.parent = os.getppid()  # the supervisor that started this master
        self.stop_requested = threading.Event()

    def sig_handler(self, signum, frame):
        if self.stop_requested.is_set():
            log.warning("second stop signal: killing the cluster's processes now")
            self.kill_sentinel()
            return
        self.stop_requested.set()
        if os.getppid() != self.parent:
            self.grace = min(self.grace, ORPHAN_GRACE_SECONDS)
            log.warning("the process that started the cluster is gone: stopping it at once")
        log.info("stopping the cluster (at most %.0f s)", self.grace)
        threading.Thread(target=self._request_stop, name="cluster-stop", daemon=True).start()
        threading.Thread(target=self._bound_stop, name="cluster-stop-bound", daemon=True).start()

    def _request_stop(self):
        # May wait for ever if the sentinel died while waiting on the event (see above): this
        # is a daemon thread, and the main thread's wait for the sentinel ends regardless.
        sentinel = self.sentinel
        if self.stop_event is not None and _started(sentinel) and not has_exited(sentinel):
            self.stop_event.set()

    def _bound_stop(self):
        sentinel = self.sentinel
        if not _started(sentinel):
            return
        if not has_exited(sentinel, self.grace):
            log.warning("the cluster did not stop within %.0f s: killing it", self.grace)
            self.kill_sentinel()

    def kill_sentinel(self):
        """SIGKILL the sentinel; its workers, pusher and monitor die with it (die_with_parent).

        A sentinel that has exited is left alone: once reaped, its pid may be another process's.
        """
        sentinel = self.sentinel
        if _started(sentinel) and not has_exited(sentinel):
            try:
                os.kill(sentinel.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Command(qcluster.Command):
    help = (
        "Starts a Django Q Cluster that stops when told (ledger/management/commands/qcluster.py)."
    )

    def handle(self, *args, **options):
        if not settings.SECRET_KEY:  # django-q2 signs tasks with it: fail here, not in a worker
            raise CommandError("SECRET_KEY must be set")
        cluster_name = options.get("cluster_name")
        if cluster_name:
            os.environ["Q_CLUSTER_NAME"] = cluster_name
        die_with_parent()
        worker.name_connections()
        cluster = StoppableCluster()
        cluster.start()
        if options.get("run_once", False):
            cluster.stop()
        # Returning leaves the main thread in multiprocessing's exit handler, joining the
        # sentinel; signal handlers run there, and it ends when the sentinel has exited.
