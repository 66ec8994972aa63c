"""What a drill case found: its checks, its notes, and how the report shows them
(``as_dict``, what ``recovery.drill.report`` keeps)."""

from __future__ import annotations

from dataclasses import dataclass, field


class CaseFailed(Exception):
    """A bounded wait ran out or a step was refused: the case did not pass."""


@dataclass
class Check:
    what: str
    ok: bool
    detail: str = ""


@dataclass
class CaseResult:
    key: str
    name: str
    expected: str
    input_reference: str
    observed: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    destination_records: int | None = None
    enquiry_reference: str = ""
    error: str = ""
    seconds: float = 0.0
    destination: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.checks) and all(c.ok for c in self.checks)

    def check(self, ok, what: str, detail: str = "") -> bool:
        self.checks.append(Check(what, bool(ok), str(detail)))
        return bool(ok)

    def note(self, text: str):
        self.observed.append(text)

    def as_dict(self) -> dict:
        observed = "; ".join(self.observed)
        failed = [f"{c.what} ({c.detail})" if c.detail else c.what for c in self.checks if not c.ok]
        if failed:
            observed += ("; " if observed else "") + "NOT MET: " + "; ".join(failed)
        if self.error:
            observed += ("; " if observed else "") + self.error
        return {
            "name": self.name,
            "input_reference": self.input_reference,
            "expected": self.expected,
            "observed": observed,
            "destination_records": self.destination_records,
            "passed": self.passed,
            "enquiry_reference": self.enquiry_reference,
            "checks": [c.__dict__ for c in self.checks],
            "seconds": round(self.seconds, 2),
            "destination": self.destination,
        }
