"""A request header waitress cannot read, answered on the intake path in the intake contract.

waitress refuses a header whose value holds a control character (DEL, NUL, ESC, a bare CR:
RFC 9110 allows none of them) with its own plain-text 400 before any application sees the
request. That is right for the console, but a sender of signed events is promised JSON
(docs/intake.md, "Answers"): a ``webhook-id``, ``webhook-timestamp`` or ``webhook-signature``
that cannot be read is a refused signature (401, in the words the view uses for a
``webhook-id`` it cannot read), and any other unreadable header a 400, each as
``{"error": ...}``. Nothing reaches Django either way: the refusal is still waitress's,
only its words change.

``GuardedParser`` notes the name of the first header line the parser refuses (only if the
name itself is a valid token: a name is never echoed otherwise); ``IntakeAwareErrorTask``
answers with it. Both subclass waitress's (``HTTPRequestParser.parse_header``,
``ErrorTask.execute``), pinned in tests/foundation/test_library_pins.py.
"""

from __future__ import annotations

import json
import re

from waitress.parser import HTTPRequestParser, ParsingError, crack_first_line, get_header_lines
from waitress.rfc7230 import HEADER_FIELD_RE
from waitress.task import ErrorTask
from waitress.utilities import BadRequest

from config.inputs import INTAKE_PATH

SIGNATURE_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")
TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")


class GuardedParser(HTTPRequestParser):
    """waitress's request parser that remembers which header it could not read."""

    refused_header = None  # a lowercased header name, or "" when the name is not readable
    refused_target = None  # (method, path) of such a request

    def parse_header(self, header_plus):
        try:
            return super().parse_header(header_plus)
        except ParsingError:
            self.refused_header, self.refused_target = _what_was_refused(header_plus)
            raise


def _what_was_refused(header_plus: bytes) -> tuple[str | None, tuple[str, str] | None]:
    first, _, rest = header_plus.partition(b"\r\n")
    try:
        method, uri, _version = crack_first_line(first.rstrip())
    except ParsingError:
        return None, None
    path = uri.split(b"?", 1)[0].decode("latin-1")
    try:
        lines = get_header_lines(rest)
    except ParsingError:  # a bare CR or LF, or a folded first line: no name to tell
        return "", (method.decode(), path)
    for line in lines:
        if HEADER_FIELD_RE.match(line):
            continue
        name = line.split(b":", 1)[0]
        readable = TOKEN.fullmatch(name) is not None and b":" in line
        return (name.decode("ascii").lower() if readable else ""), (method.decode(), path)
    return None, (method.decode(), path)


def intake_refusal(request) -> tuple[str, bytes] | None:
    """(status, JSON body) for a request to the intake path that waitress refused for a header
    it could not read; None for anything else (waitress's own answer stands)."""
    error = getattr(request, "error", None)
    target = getattr(request, "refused_target", None)
    if not isinstance(error, BadRequest) or target is None:
        return None
    method, path = target
    if method != "POST" or not path.startswith(INTAKE_PATH):
        return None
    name = request.refused_header
    if name == "webhook-id":
        from intake.services import EVENT_ID_REFUSED

        status, words = "401 Unauthorized", EVENT_ID_REFUSED
    elif name in SIGNATURE_HEADERS:
        status = "401 Unauthorized"
        words = (
            f"Signature refused: the {name} header holds a character HTTP does not allow "
            "(a control character such as DEL or NUL)."
        )
    else:
        status = "400 Bad Request"
        words = (
            "A request header holds a character HTTP does not allow (a control character such "
            "as DEL or NUL); nothing was stored."
        )
    return status, json.dumps({"error": words}).encode()


class IntakeAwareErrorTask(ErrorTask):
    """waitress's error answer, in the intake contract's JSON on the intake path."""

    def execute(self):
        answer = intake_refusal(self.request)
        if answer is None:
            return super().execute()
        status, body = answer
        self.status = status
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)
