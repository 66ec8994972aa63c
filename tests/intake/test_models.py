"""intake.models.Category: its keywords are bounded in count and length, in its own validation
and in what the keyword suggester is given."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from intake.models import KEYWORD_MAX_LENGTH, KEYWORDS_MAX, Category


@pytest.mark.parametrize(
    "keywords",
    [
        "\n".join(f"w{i}" for i in range(KEYWORDS_MAX + 1)),
        "y" * (KEYWORD_MAX_LENGTH + 1),
        "bin\x0bwaste",
    ],
)
def test_a_category_refuses_keywords_past_its_bounds(db, keywords):
    with pytest.raises(ValidationError) as refused:
        Category(slug="waste", name="Waste", keywords=keywords).full_clean()
    assert "keywords" in refused.value.message_dict


def test_a_row_stored_before_the_bounds_gives_the_suggester_at_most_the_bound():
    stored = Category(
        slug="waste",
        name="Waste",
        keywords="\n".join(["z" * 500, *(f"w{i}" for i in range(300_000))]),
    )
    words = stored.keyword_list()
    assert len(words) == KEYWORDS_MAX
    assert all(len(w) <= KEYWORD_MAX_LENGTH for w in words)
