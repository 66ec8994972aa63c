"""What a destination (or an exception) says, made storable: the one cleaning step before text
from outside is written to PostgreSQL, a journal row or a page.

PostgreSQL refuses a NUL character in text and in jsonb (``\\u0000``), and UTF-8 cannot carry a
lone surrogate; a destination's answer (or an error message quoting it) can hold either. Each
becomes U+FFFD, so the record still shows that something was there. Every connector attempt,
operation error and check-connection result passes through here (ledger.execution.outcomes,
ledger.services.integrations, ledger.receipt).
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
# NUL, and lone surrogates (U+D800..U+DFFF cannot stand alone in UTF-8).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def text(value, limit: int | None = None) -> str:
    """``value`` as text PostgreSQL stores, cut to ``limit`` characters when given."""
    if value is None:
        return ""
    if not isinstance(value, str):
        value = str(value)
    value = _UNSTORABLE.sub(REPLACEMENT, value)
    return value if limit is None else value[:limit]


def status(value) -> int | None:
    """A status code as the records keep it (an HTTP status, an SMTP reply code: three digits,
    100 to 999), or None. Anything else a destination could send (0, -1, a huge number) would
    break the columns' check; the words of the error still say what came."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 100 <= value <= 999 else None


def data(value):
    """A JSON-shaped value (dicts, lists, scalars) with every string, keys too, cleaned."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {text(k): data(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [data(v) for v in value]
    return value
