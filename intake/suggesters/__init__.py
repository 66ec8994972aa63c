"""Category suggesters. ``get_suggester()`` builds the one settings.SUGGESTER names."""

from django.conf import settings

from intake.suggesters.base import Answer, Candidate, Suggester, SuggesterError
from intake.suggesters.keywords import KeywordSuggester
from intake.suggesters.openai_chat import OpenAIChatSuggester

__all__ = [
    "Answer",
    "Candidate",
    "KeywordSuggester",
    "OpenAIChatSuggester",
    "Suggester",
    "SuggesterError",
    "get_suggester",
]


def get_suggester(name: str | None = None) -> Suggester:
    name = name or settings.SUGGESTER
    if name == "keywords":
        return KeywordSuggester()
    if name == "openai":
        return OpenAIChatSuggester(
            base_url=settings.OPENAI_BASE_URL,
            model=settings.OPENAI_MODEL,
            api_key=settings.OPENAI_API_KEY,
            timeout=settings.OPENAI_TIMEOUT_SECONDS,
        )
    raise ValueError(f"Unknown suggester {name!r}: use keywords or openai.")
