"""Measuring a suggester on the labelled set: what it answered, when it abstained, how it erred.

Each message goes through the same validation as production (classification.judge), so the
numbers describe what a reviewer would actually see: an answer is a label that passed
validation; everything else is an abstention (``unresolved``, to review).
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from intake.classification import UNRESOLVED, candidates_from, judge
from intake.suggesters import Answer, Candidate, SuggesterError

HERE = Path(__file__).resolve().parent / "classifier_eval"
LABELLED = HERE / "labelled.jsonl"
CATEGORIES = HERE / "categories.json"
# "Confidently wrong": a validated answer, wrong, with at least this confidence (or none given).
CONFIDENT = 0.75


@dataclass
class Outcome:
    id: str
    kind: str
    expected: str
    label: str
    confidence: float | None
    validation: str

    @property
    def answered(self) -> bool:
        return self.label != UNRESOLVED


@dataclass
class Report:
    provider: str
    model: str
    prompt_version: str
    outcomes: list[Outcome] = field(default_factory=list)
    confident: float = CONFIDENT

    @property
    def total(self):
        return len(self.outcomes)

    @property
    def answered(self):
        return [o for o in self.outcomes if o.answered]

    @property
    def correct(self):
        return [o for o in self.answered if o.label == o.expected]

    @property
    def abstained(self):
        return [o for o in self.outcomes if not o.answered]

    @property
    def confidently_wrong(self):
        return [
            o
            for o in self.answered
            if o.label != o.expected and (o.confidence is None or o.confidence >= self.confident)
        ]

    def as_dict(self) -> dict:
        answered, total = len(self.answered), self.total
        return {
            "provider": self.provider,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "messages": total,
            "kinds": dict(Counter(o.kind for o in self.outcomes)),
            "answered": answered,
            "correct": len(self.correct),
            "accuracy_on_answered": round(len(self.correct) / answered, 4) if answered else None,
            "abstained": len(self.abstained),
            "abstention_rate": round(len(self.abstained) / total, 4) if total else None,
            "correct_abstentions": sum(o.expected == UNRESOLVED for o in self.abstained),
            "confident_threshold": self.confident,
            "confidently_wrong": len(self.confidently_wrong),
            "confidently_wrong_rate": round(len(self.confidently_wrong) / total, 4)
            if total
            else None,
            "confidently_wrong_ids": [o.id for o in self.confidently_wrong],
            "outcomes": [o.__dict__ for o in self.outcomes],
        }


class _FileCategory:
    """A category read from categories.json, shaped like the model for candidates_from()."""

    def __init__(self, row):
        self.slug = row["slug"]
        self.name = row.get("name", self.slug)
        self.description = row.get("description", "")
        self.active = bool(row.get("active", True))
        self._keywords = [k.lower() for k in row.get("keywords", [])]

    def keyword_list(self):
        return self._keywords


def load_labelled(path: Path = LABELLED) -> list[dict]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            row = json.loads(line)
            if not {"id", "text", "label", "kind"} <= set(row):
                raise ValueError(f"{path}:{number}: needs id, text, label and kind")
            rows.append(row)
    return rows


def file_categories(path: Path = CATEGORIES) -> list:
    return [_FileCategory(row) for row in json.loads(path.read_text())]


def evaluate(
    suggester,
    rows: list[dict],
    categories: list,
    *,
    min_confidence: float,
    confident: float = CONFIDENT,
) -> Report:
    active = {c.slug for c in categories if c.active}
    retired = {c.slug for c in categories if not c.active}
    offered: list[Candidate] = candidates_from([c for c in categories if c.active])
    report = Report(suggester.name, suggester.model, suggester.prompt_version, confident=confident)
    for row in rows:
        try:
            answer = suggester.suggest(row["text"], offered)
        except SuggesterError as exc:
            answer = Answer(None, None, "", f"provider error: {exc}")
        verdict = judge(answer, active=active, retired=retired, min_confidence=min_confidence)
        report.outcomes.append(
            Outcome(
                row["id"],
                row["kind"],
                row["label"],
                verdict.label,
                verdict.confidence,
                verdict.validation,
            )
        )
    return report
