"""What the fault proxy can do to a request: targets, modes, armed faults and counters.

Kept apart from the HTTP plumbing (``server``) so the rules can be read on one page: a target is
``"METHOD /path"`` (or a name given at start), a fault fires on the next ``count`` requests that
match it, the oldest armed first.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any

CONTROL_PREFIX = "/_proxy/"

# Answered by the proxy, nothing forwarded: the status, a JSON body; Retry-After on a 429
# (1 s unless the fault names one) and on a 503 only when the fault names one.
ERROR_FAULTS = {
    "error_401": (401, "unauthorized"),
    "error_403": (403, "forbidden"),
    "error_422": (422, "unprocessable_entity"),
    "error_429": (429, "too_many_requests"),
    "error_503": (503, "service_unavailable"),
}
FORWARDING_MODES = (
    "reset_before_commit",  # RST before forwarding: nothing reaches the upstream
    "drop_after_forward",  # forward; the upstream answers; close without a word
    "timeout_after_commit",  # forward; hold the answer delay_ms, then send it (as the sandbox)
    "hold",  # forward; keep the answer until the caller hangs up (or delay_ms), then close
    "late",  # keep the request until released (or delay_ms after the caller hung up), then forward
    "latency",  # wait delay_ms, then forward and answer normally (as the sandbox)
)
MODES = (*ERROR_FAULTS, *FORWARDING_MODES)
DELAY_MODES = ("timeout_after_commit", "hold", "late", "latency")
RETRY_AFTER_MODES = ("error_429", "error_503")
DEFAULT_DELAY_MS = {"timeout_after_commit": 5000, "latency": 1000}
FAULT_FIELDS = {"target", "mode", "count", "delay_ms", "retry_after"}


@dataclass(frozen=True)
class Pattern:
    """``"METHOD /path"``: that method (``*`` for any) and exactly that path; a path ending in
    ``*`` matches every path starting with what comes before it. The query is never matched."""

    method: str
    path: str
    prefix: bool

    @classmethod
    def parse(cls, text: str) -> Pattern:
        parts = text.split() if isinstance(text, str) else []
        if len(parts) != 2:
            raise ValueError(f"{text!r} is not 'METHOD /path' (e.g. 'POST /api/cases/')")
        method, path = parts
        if method != "*" and not (method.isascii() and method.isalpha() and method.isupper()):
            raise ValueError(f"{text!r}: the method must be upper case letters or '*'")
        if not path.startswith("/"):
            raise ValueError(f"{text!r}: the path must start with '/'")
        if path.startswith(CONTROL_PREFIX):
            raise ValueError(f"{text!r}: {CONTROL_PREFIX} is the proxy's own control API")
        prefix = path.endswith("*")
        return cls(method, path[:-1] if prefix else path, prefix)

    def matches(self, method: str, path: str) -> bool:
        if self.method not in ("*", method):
            return False
        return path.startswith(self.path) if self.prefix else path == self.path

    def __str__(self) -> str:
        return f"{self.method} {self.path}{'*' if self.prefix else ''}"


@dataclass
class Fault:
    seq: int
    target: str
    pattern: Pattern
    mode: str
    remaining: int
    delay_ms: int | None
    retry_after: str | None

    def describe(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "match": str(self.pattern),
            "mode": self.mode,
            "remaining": self.remaining,
            "delay_ms": self.delay_ms,
            "retry_after": self.retry_after,
        }

    def delay_seconds(self) -> float:
        delay_ms = self.delay_ms if self.delay_ms is not None else DEFAULT_DELAY_MS[self.mode]
        return delay_ms / 1000.0


@dataclass
class Counters:
    seen: int = 0
    forwarded: int = 0  # the upstream answered, whatever the status: it has had the request
    upstream_unreachable: int = 0  # could not connect: nothing was sent, the client got a 502
    upstream_lost: int = 0  # sent, no answer from the upstream: the client's connection dropped
    faulted: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "seen": self.seen,
            "forwarded": self.forwarded,
            "upstream_unreachable": self.upstream_unreachable,
            "upstream_lost": self.upstream_lost,
            "faulted": dict(sorted(self.faulted.items())),
        }


class ProxyState:
    """Armed faults and counters, shared by every handler thread (one lock guards all)."""

    def __init__(self, targets: dict[str, str] | None = None) -> None:
        self.lock = threading.Lock()
        self.named = {name: Pattern.parse(text) for name, text in (targets or {}).items()}
        self.faults: list[Fault] = []
        self.next_seq = 1
        self.held = 0
        self.in_flight = 0
        self.release_generation = 0
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.total = Counters()
        # The most requests the proxy had in hand at once since the last reset.
        self.peak_in_flight = self.in_flight
        # Every named target, and every pattern a fault was ever armed on, has counters.
        self.patterns: dict[str, Pattern] = dict(self.named)
        self.counters: dict[str, Counters] = {key: Counters() for key in self.patterns}

    def resolve(self, target: str) -> tuple[str, Pattern]:
        """A named target, or a ``METHOD /path`` pattern (written in its canonical form)."""
        if target in self.named:
            return target, self.named[target]
        pattern = Pattern.parse(target)
        return str(pattern), pattern

    def arm(self, target: str, mode: str, count: int, delay_ms, retry_after) -> Fault:
        key, pattern = self.resolve(target)
        with self.lock:
            fault = Fault(self.next_seq, key, pattern, mode, count, delay_ms, retry_after)
            self.next_seq += 1
            self.faults.append(fault)
            self.patterns.setdefault(key, pattern)
            self.counters.setdefault(key, Counters())
            return fault

    def begin(self, method: str, path: str) -> tuple[Fault | None, list[str]]:
        """Count a request against every target it matches and consume the oldest fault armed
        for any of them; return that fault (a snapshot) and the matched targets."""
        with self.lock:
            keys = [key for key, pattern in self.patterns.items() if pattern.matches(method, path)]
            self.total.seen += 1
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            for key in keys:
                self.counters[key].seen += 1
            fault = next((f for f in self.faults if f.pattern.matches(method, path)), None)
            if fault is None:
                return None, keys
            fault.remaining -= 1
            if fault.remaining == 0:
                self.faults.remove(fault)
            for counters in (self.total, *(self.counters[key] for key in keys)):
                counters.faulted[fault.mode] = counters.faulted.get(fault.mode, 0) + 1
            return dataclasses.replace(fault), keys

    def finished(self) -> None:
        with self.lock:
            self.in_flight -= 1

    def count(self, keys: list[str], what: str) -> None:
        with self.lock:
            # A reset while the request was held may have dropped a pattern's counters.
            present = [self.counters[key] for key in keys if key in self.counters]
            for counters in (self.total, *present):
                setattr(counters, what, getattr(counters, what) + 1)

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def reset(self) -> None:
        with self.lock:
            self.faults.clear()
            self._reset_counters()

    def pending(self) -> list[dict[str, Any]]:
        with self.lock:
            return [fault.describe() for fault in self.faults]

    def hold_started(self) -> int:
        with self.lock:
            self.held += 1
            return self.release_generation

    def hold_ended(self) -> None:
        with self.lock:
            self.held -= 1

    def released_since(self, generation: int) -> bool:
        with self.lock:
            return self.release_generation != generation

    def release(self) -> int:
        with self.lock:
            self.release_generation += 1
            return self.held

    def stats(self, upstream: str) -> dict[str, Any]:
        with self.lock:
            return {
                "upstream": upstream,
                "total": self.total.as_dict(),
                "targets": {
                    key: {"match": str(self.patterns[key]), **self.counters[key].as_dict()}
                    for key in sorted(self.counters)
                },
                "faults_pending": [fault.describe() for fault in self.faults],
                "held": self.held,
                "in_flight": self.in_flight,
                "peak_in_flight": self.peak_in_flight,
            }


class InvalidFaultError(ValueError):
    pass


def validate_fault(payload: Any, state: ProxyState) -> dict[str, Any]:
    if not isinstance(payload, dict):
        raise InvalidFaultError("the body must be a JSON object")
    unknown = sorted(set(payload) - FAULT_FIELDS)
    if unknown:
        raise InvalidFaultError(f"unknown fields {unknown}; allowed: {sorted(FAULT_FIELDS)}")
    target = payload.get("target")
    if not isinstance(target, str) or not target.strip():
        raise InvalidFaultError(
            "'target' must be a named target "
            f"({sorted(state.named) or 'none configured'}) or 'METHOD /path'"
        )
    try:
        state.resolve(target)
    except ValueError as exc:
        raise InvalidFaultError(f"'target': {exc}") from None
    mode = payload.get("mode")
    if mode not in MODES:
        raise InvalidFaultError(f"'mode' must be one of {list(MODES)}")
    count = payload.get("count", 1)
    if not _is_int(count) or count < 1:
        raise InvalidFaultError("'count' must be a positive integer")
    delay_ms = payload.get("delay_ms")
    if delay_ms is not None:
        if mode not in DELAY_MODES:
            raise InvalidFaultError(f"'delay_ms' applies only to {list(DELAY_MODES)}")
        if not _is_int(delay_ms) or delay_ms < 0:
            raise InvalidFaultError("'delay_ms' must be a non-negative integer")
    retry_after = payload.get("retry_after")
    if retry_after is not None:
        if mode not in RETRY_AFTER_MODES:
            raise InvalidFaultError(f"'retry_after' applies only to {list(RETRY_AFTER_MODES)}")
        if _is_int(retry_after) and retry_after >= 0:
            retry_after = str(retry_after)
        elif not (
            isinstance(retry_after, str)
            and 0 < len(retry_after) <= 100
            and retry_after.isascii()
            and retry_after.isprintable()
        ):
            raise InvalidFaultError(
                "'retry_after' must be seconds (an integer >= 0) or an HTTP date string"
            )
    return {
        "target": target,
        "mode": mode,
        "count": count,
        "delay_ms": delay_ms,
        "retry_after": retry_after,
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
