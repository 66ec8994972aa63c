"""ledger.smtp without a relay: the address an integration holds, the relay's queue id, the
smtp kind's validation. (Against a real relay: test_email.py.)"""

import pytest
from django.core.exceptions import ValidationError

from ledger import notices, smtp
from ledger.kinds import SMTP
from ledger.models import Integration


@pytest.mark.parametrize(
    "url, relay",
    [
        ("smtp://127.0.0.1:2525", ("127.0.0.1", 2525, "none", "")),
        (
            "smtp+starttls://handover@relay.example.org",
            ("relay.example.org", 587, "starttls", "handover"),
        ),
        ("smtps://a%40b@relay.example.org:2465", ("relay.example.org", 2465, "ssl", "a@b")),
    ],
)
def test_the_relay_an_address_names(url, relay):
    got = smtp.relay_from_url(url, "secret")
    assert (got.host, got.port, got.security, got.username) == relay
    assert got.password == "secret"
    assert "secret" not in got.describe()


@pytest.mark.parametrize(
    "url, words",
    [
        ("http://relay.example.org", "starts smtp://"),
        ("smtp://relay.example.org:99999", "port"),
        ("smtp://:25", "no host"),
        ("smtp://relay.example.org/path", "only scheme"),
        ("smtp://user:hunter2@relay.example.org", "token field"),
    ],
)
def test_an_address_that_names_no_relay_is_said_plainly(url, words):
    with pytest.raises(ValueError, match=words):
        smtp.relay_from_url(url)


@pytest.mark.parametrize(
    "reply, queue_id",
    [
        ("2.0.0 Ok: queued as 4F1B2C3D", "4F1B2C3D"),
        ("OK id=1kXyZa-0004Qm-7v", "1kXyZa-0004Qm-7v"),
        ("2.0.0 OK", ""),
    ],
)
def test_the_relays_queue_id(reply, queue_id):
    assert smtp.queue_id(reply) == queue_id


def test_the_message_id_is_made_from_the_key_alone():
    one = notices.message_id("e:notify.send:enquiry_received:r1")
    assert one == notices.message_id("e:notify.send:enquiry_received:r1")
    assert one != notices.message_id("e:notify.send:enquiry_received:r2")
    assert one.startswith("<") and one.endswith("@handover.message-id>")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "kind, url, field",
    [
        (SMTP, "http://127.0.0.1:8765", "base_url"),
        ("handover", "smtp://127.0.0.1:25", "base_url"),
    ],
)
def test_each_kind_takes_its_own_addresses(kind, url, field):
    row = Integration(name="notify", kind=kind, base_url=url, timeout_seconds=5)
    with pytest.raises(ValidationError) as refused:
        row.full_clean()
    assert field in refused.value.message_dict


@pytest.mark.django_db
def test_the_smtp_kind_serves_only_notifications():
    row = Integration(name="crm", kind=SMTP, base_url="smtp://127.0.0.1:25", timeout_seconds=5)
    with pytest.raises(ValidationError) as refused:
        row.full_clean()
    assert "cannot serve" in str(refused.value.message_dict["kind"])
    Integration(
        name="notify", kind=SMTP, base_url="smtp://127.0.0.1:25", timeout_seconds=5
    ).full_clean()


@pytest.mark.django_db
def test_the_acknowledgement_never_claims_a_review():
    payload = {"template": notices.ACKNOWLEDGEMENT, "reference": "R-1"}
    _subject, text, html = notices.resident_message(payload)
    assert "R-1" in text and "R-1" in html
    for claim in ("reviewed", "looked at", "has been read"):
        assert claim not in text.lower()


@pytest.mark.django_db
def test_values_are_escaped_in_html_and_kept_in_text():
    # A payload made before the words were kept in it: filled from the current template.
    payload = {
        "template": notices.NEEDS_INFORMATION,
        "reference": "R-1",
        "request": "<script>x</script> & more\nline two",
    }
    subject, text, html = notices.resident_message(payload)
    assert "<script>x</script> & more" in text
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "\n" not in subject


def _written(to, sender="Handover <handover@example.org>"):
    from django.core.mail import EmailMultiAlternatives

    email = EmailMultiAlternatives("Hello", "Bödy\n", sender, [to])
    envelope_sender, recipients = smtp.envelope(email)
    return smtp.message_bytes(email, envelope_sender, recipients), recipients


def test_an_idn_domain_is_written_in_ascii_in_the_headers_too():
    data, [recipient] = _written("Zoë Q <a@bücher.de>")
    assert recipient.address == "a@xn--bcher-kva.de" and not recipient.needs_smtputf8
    headers = data.split(b"\r\n\r\n")[0]
    assert b"a@xn--bcher-kva.de" in headers and headers.isascii()


def test_an_international_local_part_is_written_in_utf8_not_as_an_encoded_word():
    data, [recipient] = _written("josé@example.org")
    assert recipient.needs_smtputf8
    headers = data.split(b"\r\n\r\n")[0]
    assert "\r\nTo: josé@example.org\r\n".encode() in headers
    assert b"From: Handover <handover@example.org>" in headers
    assert "Bödy".encode() in data  # the body as Django made it
