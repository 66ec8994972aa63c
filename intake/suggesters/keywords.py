"""The deterministic default: count each category's configured keywords in the message."""

import json
import re
from functools import lru_cache

from intake.suggesters.base import Answer, Candidate

VERSION = "kw-1"


@lru_cache(maxsize=4096)  # every category's keywords, compiled once, not on every enquiry
def _pattern(keyword: str) -> re.Pattern:
    # Whole words only: "bin" must not fire on "cabinet" or "binary".
    words = [re.escape(w) for w in keyword.lower().split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)")


class KeywordSuggester:
    name = "keywords"
    model = "keywords"
    prompt_version = VERSION

    def suggest(self, text: str, candidates: list[Candidate]) -> Answer:
        lowered = text.lower()
        scores: dict[str, list[str]] = {}
        for candidate in candidates:
            hits = [k for k in candidate.keywords if k and _pattern(k).search(lowered)]
            if hits:
                scores[candidate.slug] = hits
        raw = {slug: hits for slug, hits in sorted(scores.items())}
        if not scores:
            return Answer(
                None, None, json.dumps(raw), "No configured keyword appears in the message."
            )
        ranked = sorted(scores.items(), key=lambda item: len(item[1]), reverse=True)
        best_slug, best_hits = ranked[0]
        if len(ranked) > 1 and len(ranked[1][1]) == len(best_hits):
            tied = sorted(slug for slug, hits in ranked if len(hits) == len(best_hits))
            return Answer(
                None, None, json.dumps(raw), f"Equally strong matches: {', '.join(tied)}."
            )
        total = sum(len(hits) for hits in scores.values())
        return Answer(
            best_slug,
            round(len(best_hits) / total, 3),
            json.dumps(raw),
            f"Matched {', '.join(best_hits)}.",
        )
