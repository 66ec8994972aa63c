"""The resident's link and reply address (intake.residentlink): absolute, signed, expiring,
revocable, and never read from anything we did not make."""

from datetime import timedelta

import pytest
from django.utils import timezone

from intake import residentlink
from intake.models import Enquiry
from tests.intake.factories import EnquiryFactory

pytestmark = pytest.mark.django_db


def test_the_link_is_absolute_from_console_url_and_reads_back(settings):
    settings.CONSOLE_URL = "https://handover.council.example:8443/"
    enquiry = EnquiryFactory()
    url = residentlink.url_for(enquiry)
    assert url.startswith("https://handover.council.example:8443/r/") and url.endswith("/")
    link = residentlink.read(url.split("/r/", 1)[1].rstrip("/"))
    assert link.enquiry == enquiry and not link.expired()


def test_a_link_expires_after_the_days_set(settings):
    settings.RESIDENT_LINK_DAYS = 30
    enquiry = EnquiryFactory()
    made = timezone.now() - timedelta(days=30, seconds=5)
    link = residentlink.read(residentlink.token_for(enquiry, now=made))
    assert link.enquiry == enquiry and link.expired()
    assert not residentlink.read(
        residentlink.token_for(enquiry, now=timezone.now() - timedelta(days=29))
    ).expired()


def test_a_link_made_with_another_secret_key_or_salt_is_nothing(settings):
    enquiry = EnquiryFactory()
    token = residentlink.token_for(enquiry)
    settings.SECRET_KEY = "another-key-entirely"
    assert residentlink.read(token) is None


def test_a_new_resident_secret_revokes_links_and_reply_addresses(settings):
    settings.RESIDENT_REPLY_DOMAIN = "reply.council.example"
    enquiry = EnquiryFactory()
    token, address = residentlink.token_for(enquiry), residentlink.reply_address(enquiry)
    assert residentlink.enquiry_for_reply_address(address) == enquiry
    Enquiry.objects.filter(pk=enquiry.pk).update(resident_secret="new")
    assert residentlink.read(token) is None
    assert residentlink.enquiry_for_reply_address(address) is None


def test_a_reply_address_fits_an_address_and_is_read_in_any_case(settings):
    settings.RESIDENT_REPLY_DOMAIN = "Reply.Council.example"
    enquiry = EnquiryFactory()
    address = residentlink.reply_address(enquiry)
    local = address.split("@")[0]
    assert len(local) <= 64 and local == local.lower()
    assert residentlink.enquiry_for_reply_address(f"  {address.upper()} ") == enquiry
    assert residentlink.enquiry_for_reply_address(f"{local}@other.example") is None


def test_no_reply_address_without_a_domain(settings):
    settings.RESIDENT_REPLY_DOMAIN = ""
    assert residentlink.reply_address(EnquiryFactory()) is None


@pytest.mark.parametrize(
    "token", ["", "x", "a:b:c", "e30:1abc:" + "A" * 43, "\ud800", "é" * 10, "1" * 400]
)
def test_anything_else_is_no_link(token):
    assert residentlink.read(token) is None
