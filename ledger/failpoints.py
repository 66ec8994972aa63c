"""Named places where a test can crash a real process (off unless HANDOVER_FAILPOINTS names them).

    HANDOVER_FAILPOINTS=after_call_succeeded python manage.py qcluster

A failpoint SIGKILLs its whole process group, as a machine losing power would: the cluster's
sentinel, pusher, monitor and every worker die together and nothing gets to clean up. Start a
process you arm in its own session (``start_new_session=True``), as the tests and ``runall`` do.

Names:
- ``after_model_returns``: the suggester answered; its outcome is not yet in the ledger.
- ``after_approval``: an approval (with its task) has committed; nothing has run yet.
- ``during_call``: the external request is in flight (``HANDOVER_FAILPOINT_DELAY`` seconds after
  it started, 0.3 by default).
- ``after_call_succeeded``: the destination answered 2xx; the ledger has not recorded it.
"""

import os
import signal
import threading

from django.conf import settings

NAMES = ("after_model_returns", "after_approval", "during_call", "after_call_succeeded")


def armed(name: str) -> bool:
    return name in settings.FAILPOINTS


def crash(name: str):
    # Flush nothing, close nothing: the point is to leave whatever was in flight behind.
    os.write(2, f"FAILPOINT {name}: killing process group {os.getpgrp()}\n".encode())
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(137)


def hit(name: str):
    if armed(name):
        crash(name)


def arm_during_call():
    """A timer that crashes the process mid-call; the caller cancels it when the call ends."""
    if not armed("during_call"):
        return None
    delay = float(os.environ.get("HANDOVER_FAILPOINT_DELAY", "0.3"))
    timer = threading.Timer(delay, crash, args=("during_call",))
    timer.daemon = True
    timer.start()
    return timer
