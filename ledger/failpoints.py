"""Named places where a test can crash a real process (off unless HANDOVER_FAILPOINTS names them).

    HANDOVER_FAILPOINTS=after_call_succeeded python manage.py qcluster

A failpoint SIGKILLs its whole process group, as a machine losing power would: the cluster's
sentinel, pusher, monitor and every worker die together and nothing gets to clean up. Start a
process you arm in its own session (``start_new_session=True``), as the tests and ``runall`` do.

A failpoint armed as ``name`` fires on the first operation of any kind that reaches it. Armed as
``name@<operation id or idempotency key>`` it fires only for that operation, so a test (or the
drill) crashes on its own write however much other work the cluster does first:

    HANDOVER_FAILPOINTS=after_call_succeeded@<enquiry id>:crm.create_enquiry:r1

(an idempotency key is known before the operation is approved; its id is not).

Names:
- ``after_model_returns``: the suggester answered; its outcome is not yet in the ledger.
- ``after_approval``: an approval (with its task) has committed; nothing has run yet.
- ``during_call``: the external request is in flight (``HANDOVER_FAILPOINT_DELAY`` seconds after
  it started, 0.3 by default).
- ``after_call_succeeded``: the destination answered 2xx; the ledger has not recorded it.
"""

import contextlib
import contextvars
import os
import signal
import threading

from django.conf import settings

NAMES = ("after_model_returns", "after_approval", "during_call", "after_call_succeeded")

# The operation a worker is calling out for, so the failpoints inside the call (during_call,
# after_model_returns) know whose call it is.
_current = contextvars.ContextVar("failpoint_operation", default=None)


@contextlib.contextmanager
def operation(op):
    token = _current.set(op)
    try:
        yield
    finally:
        _current.reset(token)


def armed(name: str, op=None) -> bool:
    """Is ``name`` armed for any operation, or for ``op`` (default: the one being called)?"""
    op = op if op is not None else _current.get()
    for entry in settings.FAILPOINTS:
        wanted, _, target = entry.partition("@")
        if wanted != name:
            continue
        if not target:
            return True
        if op is not None and target in (str(op.pk), getattr(op, "idempotency_key", None)):
            return True
    return False


def crash(name: str):
    # Flush nothing, close nothing: the point is to leave whatever was in flight behind.
    os.write(2, f"FAILPOINT {name}: killing process group {os.getpgrp()}\n".encode())
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(137)


def hit(name: str, op=None):
    if armed(name, op):
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
