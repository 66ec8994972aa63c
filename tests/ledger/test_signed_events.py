"""ledger.signed_events: Mailgun's signature, its window and taking an event once, as any of
Handover's Mailgun endpoints calls them."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from ledger.models import ProviderEvent
from ledger.signed_events import Refused, mailgun_signature, take_once

KEY = "key-for-tests-only"
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def signature(timestamp, token, key=KEY):
    return hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()


def test_a_right_signature_within_the_window_gives_its_moment():
    stamp = int(NOW.timestamp()) - 60
    at = mailgun_signature(stamp, "tok", signature(stamp, "tok"), key=KEY, now=NOW)
    assert at == NOW - timedelta(seconds=60)


@pytest.mark.parametrize(
    ("timestamp", "token", "key", "said"),
    [
        ("1796472000", "tok", "other-key", "does not match"),
        ("1796472000\x00", "tok", KEY, "whole number"),
        ("1796472000", "to k", KEY, "printable"),
        (str(int(NOW.timestamp()) - 901), "tok", KEY, "signed 901 s ago"),
        (str(int(NOW.timestamp()) + 901), "tok", KEY, "ahead of our clock"),
    ],
)
def test_each_check_refuses_in_its_own_words(timestamp, token, key, said):
    with pytest.raises(Refused, match=said):
        mailgun_signature(timestamp, token, signature(timestamp, token, key), key=KEY, now=NOW)


def test_a_boolean_timestamp_is_not_a_number():
    with pytest.raises(Refused, match="must be text"):
        mailgun_signature(True, "tok", "x", key=KEY, now=NOW)


@pytest.mark.django_db(transaction=True)
def test_an_event_is_taken_once_and_not_at_all_when_acting_on_it_failed():
    at = datetime.now(UTC)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert take_once("Mailgun", "tok-1", at)
        raise RuntimeError("acting on it failed")
    assert not ProviderEvent.objects.exists()
    assert take_once("Mailgun", "tok-1", at)
    assert not take_once("Mailgun", "tok-1", at)
    assert take_once("Other", "tok-1", at)
