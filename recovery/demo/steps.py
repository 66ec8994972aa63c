"""What can happen in a demo story: each step is data, played by recovery.demo.play.

Times are minutes after the enquiry arrived. Actors are a demo username ("reviewer",
"coordinator", "admin") or a system label ("system:seed", "model:keywords@kw-1").
"""

from __future__ import annotations

from dataclasses import dataclass

SEED = "system:seed"
WORKER = "system:worker-demo"


@dataclass(frozen=True)
class Story:
    """One enquiry: who sent what, how long ago, and what has happened to it since."""

    subject: str
    name: str
    email: str
    message: str
    hours_ago: float
    steps: tuple = ()
    category: str | None = None  # the slug the keyword suggester finds; None: no match
    reference: str | None = None  # None: the model's generated reference
    owner: str | None = None
    review_outcome: str = ""  # set after the walk, beside the general rule (play.finish)
    deliveries: int = 1  # how many times the signed event arrived
    conflicting_delivery: bool = False  # the same event ID arrived again with another body
    receipt_error: str = ""  # its receipt work failed this way, often enough for the queue


@dataclass(frozen=True)
class Step:
    """A transition of the enquiry."""

    minutes: float
    name: str
    actor: str = SEED
    reason: str = ""
    evidence: dict | None = None


def approve(minutes):
    """The reviewer approves revision 1."""
    return Step(minutes, "approve", actor="reviewer", reason="fields checked")


@dataclass(frozen=True)
class Intake:
    """Validated, classified by the keyword suggester, ready for review."""

    minutes: float = 0.1
    explanation: str = ""
    confidence: float = 0.82
    suggestion: str = "valid"  # anything else: the suggester's validation of "unresolved"


@dataclass(frozen=True)
class Revise:
    """A reviewer makes revision 2 (changed fields), which needs approving again."""

    minutes: float
    note: str
    fields: dict
    actor: str = "reviewer"


@dataclass(frozen=True)
class Call:
    """One try at the destination (a call, or a lookup), ``minutes`` after the enquiry arrived."""

    minutes: float
    outcome: str
    kind: str = "call"
    status: int | None = None
    error_class: str = ""
    error_message: str = ""
    took: float | None = 0.4  # seconds; None: still running
    body: str = ""


def lookup(minutes, outcome, **kwargs):
    return Call(minutes, outcome, kind="lookup", **kwargs)


@dataclass(frozen=True)
class Write:
    """An operation on an integration, its transitions and its attempts.

    ``transitions`` are ``(minutes after the write was proposed, name, reason[, actor])``; the
    actor is the seed for "approve" and the demo worker otherwise. ``compensates`` names the
    action of an earlier write in the same story.
    """

    action: str
    integration: str
    minutes: float
    transitions: tuple = ()
    attempts: tuple = ()
    attention: str = ""
    external_id: str = ""
    error: tuple = ("", "")  # (last_error_class, last_error_message)
    held: bool = False
    compensates: str | None = None
    result: dict | None = None  # what the engine kept (a look-up's duplicates)
    # The records the destination holds for this write, by the names the story uses for them:
    # made there when the story is played (demo.records), each name replaced by the real ID.
    records: tuple = ()
    # In flight: (worker, minutes after the seed) it holds the call's lease until. A worker on
    # another host is never declared gone, so the sweeper leaves it until the lease ends.
    lease: tuple = ()


@dataclass(frozen=True)
class ProposeCompensation:
    """A person proposes undoing an earlier write: journalled on the compensating write."""

    minutes: float
    action: str
    compensates: str
    reason: str
    actor: str = "admin"


@dataclass(frozen=True)
class Pause:
    """An admin pauses an integration (what it already holds waits for a backlog review)."""

    minutes: float
    integration: str
    reason: str
    actor: str = "admin"
