"""What reaches a log: never a credential, never an unbounded line.

``Redact`` is a logging filter on every handler (``configure`` adds it to the handlers Django
and libraries set up as well as to LOGGING's own). It formats the record's message once,
replaces the value of an ``Authorization`` header and any ``Basic``/``Bearer``/``Digest``
credential with "[redacted]", and cuts the message, and a traceback's text, to LOG_MAX_CHARS
characters. A library that logs what a destination answered (caldav logs a calendar's answer
at CRITICAL) can then echo neither the credential sent nor a gigabyte of answer.
"""

from __future__ import annotations

import logging
import logging.config
import re

REDACTED = "[redacted]"
# "Authorization: Basic abc", "'Authorization': 'Bearer x'", "authorization=..." (any case).
_HEADER = re.compile(r"""(?i)(\b(?:proxy-)?authorization\b["']?\s*[:=]\s*["']?)[^"'\r\n,;}\]]+""")
# A credential standing alone: "Basic dXNlcjpwYXNz", "Bearer eyJ...".
_SCHEME = re.compile(r"(?i)\b(Basic|Bearer|Digest|Token)(\s+)[A-Za-z0-9._~+/=:-]{6,}")


# A resident's page is opened by its signed link (intake.residentlink): the token in the path
# is the resident's credential, so an access line or an error naming the path keeps only "/r/".
_RESIDENT_LINK = re.compile(r"(/r/)[^/\s\"'?#]+")


def redact(text: str) -> str:
    text = _RESIDENT_LINK.sub(lambda m: m.group(1) + REDACTED, text)
    text = _HEADER.sub(lambda m: m.group(1) + REDACTED, text)
    return _SCHEME.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def bounded(text: str, limit: int) -> str:
    """``text`` redacted and cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return redact(text)
    # A little more than the limit is redacted before the cut, so that a credential the cut
    # would split is still recognised whole.
    kept = redact(text[: limit + 200])[:limit]
    return f"{kept} [cut: {len(text):,} characters in all]"


class Redact(logging.Filter):
    def __init__(self, limit: int = 8000, name: str = ""):
        super().__init__(name)
        self.limit = int(limit)

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_handover_redacted", False):
            return True  # already done for another handler
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: as logging says
            message = f"{record.msg!r} (arguments did not fit the message)"
        record.msg, record.args = bounded(message, self.limit), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = bounded(record.exc_text, self.limit)
        if record.stack_info:
            record.stack_info = bounded(record.stack_info, self.limit)
        record._handover_redacted = True
        return True


def configure(config: dict):
    """Django's LOGGING_CONFIG: LOGGING as written, then the filter on every handler any
    logger holds (Django's own, and those a library added before)."""
    from django.conf import settings

    logging.config.dictConfig(config)
    guard = Redact(getattr(settings, "LOG_MAX_CHARS", 8000))
    loggers = [logging.getLogger()] + [
        item
        for item in logging.root.manager.loggerDict.values()
        if isinstance(item, logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if not any(isinstance(f, Redact) for f in handler.filters):
                handler.addFilter(guard)
