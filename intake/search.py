"""The console's enquiry search: the searched text as one tsvector (``Enquiry.search_vector``,
computed by PostgreSQL from ``search_document``) and what a person typed as a query on it."""

import re

from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db.models import F, Func, Value

# The words the console's enquiry search reads: PostgreSQL's "simple" configuration (no
# stemming, no stop words: a name, an e-mail address or a street is found as written, in any
# language) of the text with its accents taken off by handover_unaccent (migration
# 0006_h27b_search_unaccent), so "Zoe Muller" finds "Zoë Müller" and the other way round.
SEARCH_CONFIG = "simple"
# Punctuation inside an e-mail address: replaced by spaces in a second copy of the address, so
# its words and its domain are found too ("muller", "example", "example.org").
EMAIL_PUNCTUATION = "@._-+"


def unaccented(expression):
    """``expression`` without accents: an immutable SQL function of this database (not the
    unaccent extension, which the embedded PostgreSQL that ``make run`` uses does not ship)."""
    return Func(expression, function="handover_unaccent")


def search_document() -> SearchVector:
    """The searched text as one tsvector (``Enquiry.search_vector``, computed by PostgreSQL):
    name, e-mail (whole, split at "@", and split at every punctuation mark), subject, message,
    each without accents."""
    email = F("email")
    return SearchVector(
        unaccented(F("name")),
        unaccented(email),
        unaccented(Func(email, Value("@"), Value(" "), function="replace")),
        unaccented(
            Func(
                email,
                Value(EMAIL_PUNCTUATION),
                Value(" " * len(EMAIL_PUNCTUATION)),
                function="translate",
            )
        ),
        unaccented(F("subject")),
        unaccented(F("message")),
        config=SEARCH_CONFIG,
    )


class PrefixSearchQuery(SearchQuery):
    """What a person typed, read as a web search ("quoted phrase", -not, or; any input parses),
    each word of two letters or more matching as the start of a word ("bro" finds "brown").

    websearch_to_tsquery parses, then each quoted lexeme of its text form gets ``:*`` (the text
    form always quotes lexemes and doubles quotes inside them). A one-letter word stays whole:
    every word that starts with a letter would match it.
    """

    def as_sql(self, compiler, connection, function=None, template=None):
        sql, params = super().as_sql(compiler, connection, function, template)
        prefixed = f"regexp_replace(({sql})::text, %s, %s, 'g')::tsquery"
        return prefixed, [*params, r"'((?:[^']|''){2,})'", r"'\1':*"]


# A hyphen inside a word ("nunez-family"): read whole, the query wants the compound as one
# token, which a longer compound ("the-nunez-family@…") or an e-mail address split at its
# punctuation does not hold. So the search is also made with each such word as the phrase of
# its parts ("nunez family", adjacent), and either finds it. A leading "-" still means "not";
# a query with quotes of its own is left as typed.
INNER_HYPHEN = re.compile(r"(?<=\w)-(?=\w)")


def _hyphens_as_phrases(text: str) -> str:
    if '"' in text:
        return text
    return " ".join(
        f'"{INNER_HYPHEN.sub(" ", word)}"' if INNER_HYPHEN.search(word) else word
        for word in text.split()
    )


def search_query(text: str) -> SearchQuery:
    """What a person typed as a prefix web search (``PrefixSearchQuery``)."""
    query = PrefixSearchQuery(
        unaccented(Value(text)), config=SEARCH_CONFIG, search_type="websearch"
    )
    parts = _hyphens_as_phrases(text)
    if parts == text:
        return query
    return query | PrefixSearchQuery(
        unaccented(Value(parts)), config=SEARCH_CONFIG, search_type="websearch"
    )
