"""What a suggester is: message text in, one label out, nothing else within reach.

A suggester holds no handle to models, connectors or any endpoint but its own. It is given the
text and the candidate categories as plain values, and answers with an ``Answer``. Whatever it
answers is only a proposal: intake.classification validates it against the exact active set.
"""

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Candidate:
    slug: str
    name: str
    description: str = ""
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Answer:
    label: str | None  # None: the suggester abstained
    confidence: object = None  # a float in [0, 1] when it is any good; checked, not trusted
    raw_output: str = ""
    explanation: str = ""


class SuggesterError(Exception):
    """The suggester could not answer (endpoint down, timeout, unreadable reply)."""

    def __init__(self, message: str, *, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


class Suggester(Protocol):
    name: str  # the provider: "keywords", "openai"
    model: str
    prompt_version: str

    def suggest(self, text: str, candidates: list[Candidate]) -> Answer: ...
