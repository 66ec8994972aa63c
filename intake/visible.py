"""Whether a piece of text a person typed shows anything when it is read back.

A reason is written to the journal for whoever investigates later; one made only of spaces,
zero-width characters (U+200B, U+2060, U+FEFF), control or format characters, or combining
marks with nothing to sit on reads as blank there, so it is no reason at all.
"""

import unicodedata

# Letters, numbers, punctuation and symbols are seen; separators (Z*), control, format,
# surrogate, private-use and unassigned code points (C*) and bare marks (M*) are not.
_VISIBLE = frozenset("LNPS")


def has_visible_text(text: str | None) -> bool:
    return any(unicodedata.category(ch)[0] in _VISIBLE for ch in text or "")
