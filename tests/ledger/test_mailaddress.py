"""Addresses as the SMTP envelope writes them (ledger.mailaddress): IDNA domains, SMTPUTF8 only
for a local part outside ASCII, and an address that cannot be written said in words."""

import pytest

from ledger import mailaddress


@pytest.mark.parametrize(
    "given, address, smtputf8",
    [
        ("resident@example.org", "resident@example.org", False),
        ("Handover <handover@example.org>", "handover@example.org", False),
        ("a@bücher.de", "a@xn--bcher-kva.de", False),
        ("josé@example.org", "josé@example.org", True),
        ("用户@例子.广告", "用户@xn--fsqu00a.xn--4rr70v", True),
        ("a@[192.0.2.1]", "a@[192.0.2.1]", False),
        ("Resident@EXAMPLE.org", "Resident@EXAMPLE.org", False),  # ASCII is left as it came
    ],
)
def test_the_envelope_address(given, address, smtputf8):
    parsed = mailaddress.parse(given)
    assert parsed.address == address
    assert parsed.needs_smtputf8 is smtputf8


@pytest.mark.parametrize(
    "given, words",
    [
        ("a@-bücher.de", "not a valid international domain name"),
        ("a@bü..de", "not a valid international domain name"),
        ("no address", "not an e-mail address"),
        ("", "not an e-mail address"),
    ],
)
def test_an_address_that_cannot_be_written_is_said_plainly(given, words):
    with pytest.raises(mailaddress.AddressError, match=words):
        mailaddress.parse(given)


def test_a_name_is_kept_quoted_in_the_header():
    parsed = mailaddress.parse('"Zoë \\"Q\\"" <zoë@bücher.de>')
    assert parsed.header() == '"Zoë \\"Q\\"" <zoë@xn--bcher-kva.de>'
