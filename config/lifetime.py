"""A process that stops when its parent dies: the one place Linux's PR_SET_PDEATHSIG is set.

Used where the product starts processes (the web server's processes, config/serve.py; the
cluster's forked workers, ledger/management/commands/qcluster.py) and where the test equipment
does (harness.processes). Standard library only, so anything may import it.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Have this process sent ``sig`` when its parent dies, even by SIGKILL.

    With ``parent`` (its pid, taken before the fork): a parent that died before the request
    was made is noticed, and this process is sent ``sig`` at once. Where there is no prctl
    (not Linux), nothing is set and False is returned; the caller's own stop still applies.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    prctl(PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return True


def stop_with(parent: int, sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child is sent ``sig`` when ``parent``
    (the caller: pass ``os.getpid()``) dies."""

    def setup() -> None:
        die_with_parent(sig, parent)

    return setup
