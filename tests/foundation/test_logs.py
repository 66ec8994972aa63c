"""What reaches a log (config/logs.py): never a credential, never an unbounded line, on every
handler; the caldav library, which logs what a calendar answered, is silenced."""

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from config.checks import timeouts_are_ordered
from config.logs import Redact

ROOT = Path(__file__).resolve().parents[2]
CREDENTIAL = "Basic aGFuZG92ZXI6czNjcmV0LXBhc3N3b3Jk"  # handover:s3cret-password


def logged(message, *args, exc_info=None, limit=8000) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(Redact(limit))
    logger = logging.getLogger("tests.foundation.logs")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error(message, *args, exc_info=exc_info)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_a_million_character_message_is_cut_to_the_limit_and_says_so():
    line = logged("answer: %s", "x" * 1_000_000)
    assert len(line) < 8100
    assert "[cut: 1,000,008 characters in all]" in line


def test_a_basic_credential_is_redacted_wherever_it_stands():
    said = logged("sent {'Authorization': '%s'}; the server echoed %s", CREDENTIAL, CREDENTIAL)
    assert "aGFuZG92ZXI6" not in said
    assert "'Authorization': '[redacted]'" in said
    assert "echoed Basic [redacted]" in said
    assert "Authorization: [redacted]" in logged("Authorization: Bearer tok_abcdef123456")


def test_a_residents_link_token_is_redacted_from_an_access_line():
    token = "eyJlIjoiMGUwMDc1ZGYifQ:1xZeUk:UqAmNiAHGQkkCdS2hKWk9GtzZC1UCKz1"
    said = logged("POST /r/%s/new-link/ 302 12 ms", token)
    assert token not in said and "UqAmNi" not in said
    assert "POST /r/[redacted]/new-link/ 302" in said


def test_a_credential_that_the_cut_would_split_is_still_redacted():
    said = logged("x" * 7990 + " " + CREDENTIAL)
    assert "aGFu" not in said


def test_a_traceback_is_cut_and_redacted_too():
    try:
        raise ValueError(f"the calendar answered {CREDENTIAL} " + "y" * 100_000)
    except ValueError as exc:
        said = logged("reading failed", exc_info=exc)
    assert "aGFuZG92ZXI6" not in said
    assert len(said) < 2 * 8100


CHILD = """
import json, logging, django
django.setup()
from config.logs import Redact
loggers = [logging.getLogger()] + [
    l for l in logging.root.manager.loggerDict.values() if isinstance(l, logging.Logger)
]
# A handler that writes nothing (a library's NullHandler) needs no filter.
handlers = {h for l in loggers for h in l.handlers if type(h).__name__ != "NullHandler"}
caldav = logging.getLogger("caldav")
print(json.dumps({
    "handlers": len(handlers),
    "bare": [repr(h) for h in handlers if not any(isinstance(f, Redact) for f in h.filters)],
    "caldav_propagates": caldav.propagate,
    "caldav_handlers": [type(h).__name__ for h in caldav.handlers],
}))
"""


@pytest.mark.slow
def test_every_handler_has_the_filter_and_caldav_is_silent():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "HANDOVER_TESTING": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["handlers"] >= 2, said  # LOGGING's console and Django's own
    assert said["bare"] == [], said
    assert said["caldav_propagates"] is False
    assert set(said["caldav_handlers"]) == {"NullHandler"}  # its own, and LOGGING's


@override_settings(READ_BUDGET_SECONDS=60)
def test_a_read_budget_that_reaches_the_cluster_timeout_is_refused():
    assert [e.id for e in timeouts_are_ordered(None)] == ["handover.E003"]
