"""The reviewer's Request information form in a real headless Chromium, at 1440x900 and at
390 px: two texts, labelled for who reads them, and the whole e-mail previewed as the reviewer
types (htmx posts the form to the preview endpoint; no script of ours, no CSP violation), with
long and hostile values. Then the request is made, and the message proposed carries the words
for the resident and never the reason."""

from __future__ import annotations

from django.urls import reverse
from playwright.sync_api import expect

from ledger.models import Operation
from tests.recovery.browser import BROWSER, HOSTILE, SCREENSHOTS, login, page_width

pytestmark = BROWSER

UNBROKEN = "Please-send-the-address-" * 20  # one word, far wider than a phone
FOR_RESIDENT = f"Which street is the bin on, and since when? {HOSTILE} {{reference}} {UNBROKEN}"
INTERNAL = "noise team needs both; ask for their address"


def open_form(page, story, make_user, *, width):
    reviewer = make_user("reviewer", username="rhea")
    enquiry = story.enquiry(
        "ready_for_review",
        email="a.resident@example.org",
        name=f"{HOSTILE} Resident",
        subject="Bin not collected " + "x" * 150,
    )
    page.set_viewport_size({"width": width, "height": 900 if width > 400 else 844})
    login(page, reviewer.username)
    page.goto(page.base + reverse("recovery:review-item", args=[enquiry.reference]))
    page.click("#act-rev-request_information > summary")
    return enquiry


def test_request_information_shows_both_texts_and_previews_the_email(page, story, make_user):
    enquiry = open_form(page, story, make_user, width=1440)
    form = page.locator("#act-rev-request_information form")
    assert "Message to the resident" in form.inner_text()
    assert "sent to them by e-mail, word for word" in form.inner_text()
    assert "stays inside Handover: written to the journal, never sent" in form.inner_text()
    preview = page.locator("#preview-rev-request_information")
    assert "a.resident@example.org" in preview.inner_text()
    assert "[Your message to the resident appears here" in preview.inner_text()

    page.fill("#res-rev-request_information", FOR_RESIDENT)
    page.fill("#why-rev-request_information", INTERNAL)
    # htmx's answer in the preview box (a locator waits; no script is evaluated on the page).
    expect(page.locator("#preview-rev-request_information")).to_contain_text(
        "Which street is the bin on"
    )
    shown = preview.inner_text()
    assert HOSTILE in shown and "{reference}" in shown  # as typed, nothing read into it
    assert f"We need more information about your enquiry {enquiry.reference}" in shown
    assert "noise team" not in shown
    assert page.locator("script:has-text('alert')").count() == 0
    assert page_width(page) <= 1440
    form.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "request-information-1440.png"), full_page=True)

    page.click("#act-rev-request_information button[type=submit]")
    page.wait_for_url("**/console/review/**")
    op = Operation.objects.get(enquiry=enquiry, action="notify.send")
    assert "Which street is the bin on, and since when?" in op.payload["body"]
    assert "noise team" not in str(op.payload)


def test_request_information_form_fits_a_phone(page, story, make_user):
    open_form(page, story, make_user, width=390)
    page.fill("#res-rev-request_information", FOR_RESIDENT)
    page.fill("#why-rev-request_information", INTERNAL)
    # htmx's answer in the preview box (a locator waits; no script is evaluated on the page).
    expect(page.locator("#preview-rev-request_information")).to_contain_text(
        "Which street is the bin on"
    )
    assert page_width(page) <= 390
    for selector in ("#res-rev-request_information", "#preview-rev-request_information"):
        box = page.locator(selector).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (selector, box)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "request-information-390.png"), full_page=True)


def test_an_admin_previews_and_saves_the_words(page, story, make_user):
    from ledger import wording

    admin = make_user("admin", username="ada")
    enquiry = story.enquiry("ready_for_review", email="a.resident@example.org")
    login(page, admin.username)
    page.goto(page.base + "/console/messages/")
    expect(page.locator("#notice-passed_on")).to_contain_text("Passed on")
    page.click("#notice-needs_information >> text=Edit the words")
    page.fill("#id_body", f"Dear {{name}},\n\n{{{{ ''.__class__ }}}} {HOSTILE}\n\n{{nope}}\n")
    page.fill("#id_reference", enquiry.reference)
    page.fill("#id_reason", "plainer words")
    page.click("button[name=save]")
    expect(page.locator(".field-errors")).to_contain_text("{nope} is not a placeholder")
    assert wording.current(wording.NEEDS_INFORMATION).version == 1  # refused, not saved
    page.fill(
        "#id_body",
        f"Dear {{name}},\n\n{{{{ ''.__class__ }}}} {HOSTILE}\n\n{{message_to_resident}}\n",
    )
    page.click("button[name=preview]")
    expect(page.locator("pre.mail-text")).to_contain_text("{ ''.__class__ }")
    assert page_width(page) <= 1440
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "message-template-edit.png"), full_page=True)
    page.click("button[name=save]")
    expect(page.locator("body")).to_contain_text("Saved as version 2")
    assert wording.current(wording.NEEDS_INFORMATION).version == 2
