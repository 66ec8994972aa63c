"""One bounded poll for everything that waits on another process: the drill, the
benchmarks and the tests (each raises its own kind of failure)."""

import time


def wait_until(
    predicate,
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
    error: type[Exception] = RuntimeError,
):
    """Call ``predicate`` until it returns something truthy and return that; after ``timeout``
    seconds raise ``error`` saying what was awaited and the last value seen."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"{what}: not within {timeout:g}s (last seen: {value!r})")
        time.sleep(interval)
