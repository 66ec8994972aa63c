"""The resident page in a real headless Chromium at 390 px (a phone) and 1440 px: answer,
upload, a refused upload, an expired link and a new one; no sideways scroll, no CSP
violation (the page fixture fails on any), long and hostile values kept inside the page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from intake import residentlink
from intake.models import EnquiryState
from intake.residentmodels import ResidentAnswer
from ledger import notices
from ledger.models import Operation
from tests.intake.factories import EnquiryFactory
from tests.recovery.browser import BROWSER, HOSTILE, LONG_URL, SCREENSHOTS, page_width

pytestmark = BROWSER

WIDTHS = (390, 1440)
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"


def shoot(page, name, width):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"resident-{name}-{width}.png"), full_page=True)


@pytest.fixture
def asked(db):
    enquiry = EnquiryFactory(state="needs_information", email="resident@example.org")
    op = Operation.objects.get(enquiry=enquiry, payload__template=notices.NEEDS_INFORMATION)
    op.payload = {**op.payload, "message_to_resident": f"{HOSTILE}\n{LONG_URL}"}
    op.save(update_fields=["payload"])
    return enquiry


@pytest.mark.parametrize("width", WIDTHS)
def test_a_resident_answers_and_uploads_on_their_page(page, asked, width, tmp_path):
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(page.base + f"/r/{residentlink.token_for(asked)}/")
    assert "We need more information from you" in page.inner_text("h1")
    assert page.locator(".quote").inner_text().startswith('<script>alert("x")</script>')
    assert page_width(page) <= width
    shoot(page, "asked", width)

    # A file that is not a document: refused, what was typed kept, the page still fits.
    bad = tmp_path / ("a-very-long-file-name-" * 8 + ".exe")
    bad.write_bytes(b"MZ\x90\x00")
    page.fill("#text", HOSTILE + " " + LONG_URL)
    page.set_input_files("#files", str(bad))
    page.click("button[type=submit]")
    assert "not a PDF, JPEG or PNG file" in page.inner_text("#files-error")
    assert page.input_value("#text").startswith('<script>alert("x")</script>')
    assert page_width(page) <= width
    shoot(page, "refused", width)
    assert ResidentAnswer.objects.count() == 0

    good = tmp_path / "bin-photo.pdf"
    good.write_bytes(PDF)
    page.fill("#text", "It is on Mill Lane, outside number 14.")
    page.set_input_files("#files", str(good))
    page.click("button[type=submit]")
    page.wait_for_selector("#thanks")
    assert "Thank you" in page.inner_text("#thanks")
    assert page_width(page) <= width
    shoot(page, "thanks", width)
    asked.refresh_from_db()
    assert asked.state == EnquiryState.READY_FOR_REVIEW and asked.current_revision == 2
    answer = ResidentAnswer.objects.get(enquiry=asked)
    assert list(answer.files.values_list("name", flat=True)) == ["bin-photo.pdf"]


@pytest.mark.parametrize("width", WIDTHS)
def test_an_expired_link_offers_a_new_one_without_showing_the_address(page, asked, width):
    page.set_viewport_size({"width": width, "height": 800})
    token = residentlink.token_for(asked, now=timezone.now() - timedelta(days=45))
    page.goto(page.base + f"/r/{token}/")
    assert "This link has expired" in page.inner_text("h1")
    assert "resident@example.org" not in page.content()
    assert page_width(page) <= width
    shoot(page, "expired", width)
    page.click("button[type=submit]")
    page.wait_for_selector("text=A new link is on its way")
    assert "resident@example.org" not in page.content()
    shoot(page, "new-link", width)
    assert Operation.objects.filter(payload__template=notices.RESIDENT_LINK).count() == 1


def test_an_empty_and_a_broken_link_at_phone_width(page):
    page.set_viewport_size({"width": 390, "height": 700})
    page.goto(page.base + "/r/" + "x" * 400 + "/")
    assert "This link does not work" in page.inner_text("h1")
    assert page_width(page) <= 390
    shoot(page, "not-valid", 390)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_console_shows_a_waiting_reply_and_the_reply_offer(page, make_user, width):
    from intake import answers
    from tests.recovery.browser import login

    reviewer = make_user("reviewer", username="rowan")
    waiting = answers.receive_answer(
        None,
        channel="email",
        text=f"{HOSTILE}\n{LONG_URL}",
        uploads=[answers.Upload("x" * 180 + ".pdf", PDF)],
        sender="someone+" + "a" * 60 + "@example.net",
        subject=HOSTILE,
    )
    first = EnquiryFactory(state="needs_information", email="ana@example.org")
    second = EnquiryFactory(
        state="ready_for_review", email="ana@example.org", message=f"Re {first.reference}: 14."
    )
    page.set_viewport_size({"width": width, "height": 900})
    login(page, reviewer.username)
    page.goto(page.base + "/console/?state=waiting_reply")
    row = page.locator(f"tr[data-key='{waiting.pk}']")
    assert "no enquiry matched" in row.inner_text()
    assert page_width(page) <= width
    shoot(page, "console-queue", width)
    page.goto(page.base + f"/console/replies/{waiting.pk}/")
    assert "No enquiry matched" in page.inner_text("main")
    assert page_width(page) <= width
    shoot(page, "console-reply", width)
    page.fill("#reference", first.reference)
    page.fill("#attach-reason", "she names the street of " + first.reference)
    page.click("form[action$='/attach/'] button[type=submit]")
    page.wait_for_selector("text=Attached to")
    first.refresh_from_db()
    assert first.current_revision == 2

    page.goto(page.base + f"/console/review/{second.reference}/")
    assert f"This may be a reply to {first.reference}" in page.inner_text("#reply-offer")
    shoot(page, "review-offer", width)
    page.fill("#reply-reason", "same bin")
    page.click(f"text=Attach to {first.reference}")
    page.wait_for_url(f"**/console/review/{first.reference}/")
    second.refresh_from_db()
    assert second.state == EnquiryState.REJECTED
    shoot(page, "review-after-attach", width)
