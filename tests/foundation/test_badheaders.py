"""config.badheaders: which header waitress refused, told without echoing what is unreadable.
Over a real socket against config.serve: tests/security/test_slow_clients.py."""

import pytest

from config.badheaders import _what_was_refused

TARGET = ("POST", "/intake/events/website/")


@pytest.mark.parametrize(
    ("header", "name"),
    [
        (b"Webhook-ID: msg_\x7f1", "webhook-id"),
        (b"webhook-timestamp: 1\x00", "webhook-timestamp"),
        (b"X-\x7fName: a", ""),  # the name itself is unreadable: never echoed
        (b"no colon at all \x01", ""),
        (b"\x1b[31m: red", ""),
    ],
)
def test_the_refused_header_is_named_only_when_its_name_is_a_token(header, name):
    head = b"POST /intake/events/website/?a=1 HTTP/1.1\r\nHost: a\r\n" + header
    assert _what_was_refused(head) == (name, TARGET)


def test_an_unreadable_request_line_names_nothing():
    assert _what_was_refused(b"post /x HTTP/1.1\r\nA: \x7f") == (None, None)
