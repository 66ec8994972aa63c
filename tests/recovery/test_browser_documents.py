"""The review page's documents card in a real headless Chromium: long, hostile and empty values
fit the page, and a reviewer corrects a field with the form."""

from __future__ import annotations

from intake.models import Document
from ledger.models import Integration
from tests.recovery.browser import BROWSER, SCREENSHOTS, login, page_width

pytestmark = BROWSER

LONG = "Flat 4, " + "Larkspur-Row-Extension-" * 25
HOSTILE = '<img src=x onerror=alert(1)> "quoted" & ampersand'


def test_a_reviewer_sees_the_fields_read_and_corrects_one(page, story, make_user):
    Integration.objects.filter(name="documents").update(
        kind="webdav", base_url="https://dav.example.org/remote.php/dav/files/handover/enquiries"
    )
    enquiry = story.enquiry()
    form = Document.objects.create(
        enquiry=enquiry,
        document_id="permit-application-17.pdf",
        version="2146807-1796171100-789",
        status="extracted",
        content_type="application/pdf",
        extracted={"permit": "P-17", "address": LONG, "notes": HOSTILE, "ward": "", "tel": "0"},
        corrected={"tel": "07700 900456"},
    )
    Document.objects.create(
        enquiry=enquiry,
        document_id="tenancy-agreement.pdf",
        version="{8E5A1D3C-4F2B-4C1A-9D3E-2B7C6A5F4E31},12",  # SharePoint's ETag form
        status="extracted",
        content_type="application/pdf",
        text="Tenancy agreement between the council and " + "A Resident " * 40,
    )
    Document.objects.create(
        enquiry=enquiry,
        document_id="photo-" + "x" * 150 + ".pdf",
        version="2146809-1796171100-100-" + "9" * 57,  # the longest a version may be: 80
        status="access_denied",
        error="401: Not authorized (the share's credentials were changed)",
    )
    reviewer = make_user("reviewer", username="robin")
    login(page, reviewer.username)
    page.goto(page.base + f"/console/review/{enquiry.reference}/")
    card = page.locator(f"#doc-{form.pk}")
    card.wait_for()
    assert "P-17" in card.inner_text() and HOSTILE in card.inner_text()
    assert page_width(page) <= 1440
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.locator("#documents").screenshot(path=str(SCREENSHOTS / "review-documents.png"))
    page.screenshot(path=str(SCREENSHOTS / "review-documents-page.png"), full_page=True)

    card.get_by_text("Correct a field").click()
    card.locator("select[name=field]").select_option("ward")
    card.locator("input[name=value]").fill("North")
    card.locator(f"#why-doc-{form.pk}").fill("the form's second page says North")
    card.get_by_role("button", name="Save correction").click()
    page.wait_for_url(f"**/console/review/{enquiry.reference}/#doc-{form.pk}")
    assert "Corrected ward of permit-application-17.pdf" in card.inner_text()
    form.refresh_from_db()
    assert form.corrected == {"tel": "07700 900456", "ward": "North"}
    assert enquiry.revisions.count() == 2
