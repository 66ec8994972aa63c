"""The SMTP conversation's bounds (ledger.smtpwire, through ledger.smtp.send) against a real
relay (harness.mailserver) that drips, talks too much or talks nonsense: what Handover read, and
what the relay received."""

from __future__ import annotations

import pytest
from django.core.mail import EmailMultiAlternatives

from ledger import smtp, smtpwire
from ledger.errors import ConnectorError, ErrorKind

pytestmark = pytest.mark.slow


def message(number=1, to="resident@example.org"):
    email = EmailMultiAlternatives(
        "Subject",
        "Body\n",
        "Handover <handover@example.org>",
        [to],
        headers={"Message-ID": f"<m{number}@test>"},
    )
    return email


def send(mail, email, timeout=2.0):
    return smtp.send(email, relay=smtp.relay_from_url(mail.url), timeout=timeout)


def test_a_dripping_reply_is_cut_at_the_timeout_and_nothing_is_sent(mail):
    mail.fault("drip", delay=0.3)  # 11 bytes: over 3 s for one reply, each byte well in time
    with pytest.raises(ConnectorError) as cut:
        send(mail, message(), timeout=1.0)
    assert cut.value.kind is ErrorKind.TRANSIENT and cut.value.status is None
    assert "within 1s" in cut.value.message
    assert mail.stats()["received"] == 0
    assert send(mail, message(2)).code == 250  # the relay itself is fine


def test_the_conversation_before_the_message_is_bounded_as_a_whole(mail, settings):
    # Each reply line 0.15 s late (EHLO's five lines 0.75 s): every reply within its 1 s, but
    # everything before the final dot (about 1.35 s) must leave the reply to the dot its whole
    # timeout inside the worker's guard (Q_TIMEOUT, 2 s here): 1 s for all of it.
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 2}
    assert smtp.conversation_deadline(1.0) == 1.0
    mail.fault("slow_replies", delay=0.15)
    with pytest.raises(ConnectorError) as cut:
        send(mail, message(), timeout=1.0)
    assert cut.value.kind is ErrorKind.TRANSIENT
    assert mail.stats()["received"] == 0
    # With Q_TIMEOUT at its usual 60 s the same relay is merely slow: sent.
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 60}
    mail.fault("slow_replies", delay=0.15)
    assert send(mail, message(2), timeout=3.0).code == 250


def test_a_reply_longer_than_handover_reads_is_invalid_with_its_size(mail):
    mail.fault("long_reply")
    with pytest.raises(ConnectorError) as refused:
        send(mail, message())
    assert refused.value.kind is ErrorKind.INVALID
    assert f"longer than {smtpwire.MAX_REPLY_BYTES:,} bytes" in refused.value.message
    assert mail.stats()["received"] == 0


def test_a_garbage_greeting_is_transient_with_no_status(mail):
    mail.fault("garbage_greeting")
    with pytest.raises(ConnectorError) as refused:
        send(mail, message())
    assert refused.value.kind is ErrorKind.TRANSIENT and refused.value.status is None
    assert "not SMTP" in refused.value.message and "\\x00" in refused.value.message
    assert mail.stats()["received"] == 0


@pytest.mark.parametrize(
    "code, valid",
    [
        (b"250", True),
        (b"421", True),
        (b"599", True),
        (b"000", False),
        (b"-12", False),
        (b"999", False),
        (b"1_0", False),
        (b" 25", False),
        (b"\xd9\xa2\xd9\xa5\xd9\xa0"[:3], False),
    ],
)
def test_only_an_smtp_reply_code_is_a_code(code, valid):
    assert smtpwire.valid_code(code) is valid
