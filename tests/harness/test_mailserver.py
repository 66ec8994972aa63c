"""The test SMTP relay (harness.mailserver): a real server in its own process whose faults are
set over its control API; it keeps what it receives and counts it by Message-ID."""

import smtplib

import pytest

from harness.mailserver import MailServerError

pytestmark = pytest.mark.slow


def message(message_id, to="b@example.org"):
    return (f"Message-ID: {message_id}\r\nTo: {to}\r\nSubject: hi\r\n\r\n.leading dot\r\n").encode()


def send(mail, message_id, to="b@example.org", timeout=5):
    with smtplib.SMTP("127.0.0.1", mail.port, timeout=timeout) as smtp:
        return smtp.sendmail("a@example.org", [to], message(message_id, to))


def test_it_keeps_each_message_and_counts_it_by_message_id(mail):
    send(mail, "<one@x>")
    send(mail, "<one@x>")
    send(mail, "<two@x>")
    stats = mail.stats()
    assert stats["received"] == 3
    assert stats["by_message_id"] == {"<one@x>": 2, "<two@x>": 1}
    records = mail.messages()
    assert len(records) == 3
    kept = mail.read(records[0])
    assert b"Message-ID: <one@x>" in kept and b"\n.leading dot" in kept  # un-stuffed


def test_421_refuses_the_sender_once(mail):
    mail.fault("421")
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        send(mail, "<a@x>")
    assert refused.value.smtp_code == 421
    send(mail, "<a@x>")
    assert mail.stats()["by_message_id"] == {"<a@x>": 1}


def test_550_refuses_only_the_named_recipient(mail):
    mail.fault("550", recipient="bad@example.org", count=5)
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        send(mail, "<a@x>", to="bad@example.org")
    send(mail, "<b@x>", to="good@example.org")
    assert mail.stats()["by_message_id"] == {"<b@x>": 1}


def test_drop_after_data_keeps_the_message_and_never_replies(mail):
    mail.fault("drop_after_data")
    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(mail, "<a@x>")
    assert mail.count("<a@x>") == 1


def test_late_replies_after_the_senders_timeout(mail):
    mail.fault("late", delay=2)
    with pytest.raises(smtplib.SMTPServerDisconnected, match="timed out"):
        send(mail, "<a@x>", timeout=0.5)
    assert mail.count("<a@x>") == 1


def test_refuse_closes_the_port_until_cleared(mail):
    mail.fault("refuse")
    with pytest.raises(ConnectionRefusedError):
        send(mail, "<a@x>")
    mail.clear_faults()
    send(mail, "<b@x>")
    assert mail.stats()["by_message_id"] == {"<b@x>": 1}


@pytest.mark.parametrize(
    "body", [{"mode": "nope"}, {"mode": "421", "count": 0}, {"mode": "late", "delay": "x"}, []]
)
def test_a_bad_fault_is_refused_plainly(mail, body):
    with pytest.raises(MailServerError, match="400"):
        mail.call("POST", "/_mail/faults", body)


def test_no_smtputf8_stops_offering_it_until_cleared(mail):
    def offered():
        with smtplib.SMTP("127.0.0.1", mail.port, timeout=5) as smtp:
            smtp.ehlo()
            return smtp.has_extn("smtputf8")

    assert offered()
    mail.fault("no_smtputf8")
    assert not offered() and mail.stats()["smtputf8"] is False
    mail.clear_faults()
    assert offered()


def test_a_garbage_greeting_is_not_smtp(mail):
    mail.fault("garbage_greeting")
    with pytest.raises(smtplib.SMTPConnectError) as greeted:
        smtplib.SMTP("127.0.0.1", mail.port, timeout=5)
    assert greeted.value.smtp_code == -1  # what smtplib makes of it
    send(mail, "<a@x>")  # once only
    assert mail.count("<a@x>") == 1


def test_quits_answered_counts_the_goodbyes_given(mail):
    send(mail, "<a@x>")
    assert mail.stats()["quits_answered"] == 1


def test_a_long_reply_is_long(mail):
    mail.fault("long_reply")
    with smtplib.SMTP("127.0.0.1", mail.port, timeout=5) as smtp:
        smtp.ehlo()
        code, text = smtp.mail("a@example.org")
    assert code == 250 and len(text) > 100_000
