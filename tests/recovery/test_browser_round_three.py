"""Issue 27 in a real headless Chromium: a card that updates itself updates the page too,
without a Content-Security-Policy violation; a refused decision on the review page is on
screen; the item's story at a glance at desktop and phone widths."""

from __future__ import annotations

from django.db import transaction

from intake.models import Enquiry
from ledger.models import Operation
from tests.recovery.test_browser import (  # noqa: F401  (fixtures)
    HOSTILE,
    LONG_URL,
    SCREENSHOTS,
    _roles,
    chromium,
    login,
    page,
    page_width,
)

pytestmark = [
    *__import__("tests.recovery.test_browser", fromlist=["pytestmark"]).pytestmark,
]


def test_a_card_that_turns_final_updates_the_header_and_what_happened(page, story, make_user):  # noqa: F811
    # Issue 27, defect 8: the card turned Confirmed, the header badge and "What happened" kept
    # the old state; polling logged CSP violations (the page fixture fails on any).
    coordinator = make_user("coordinator", username="casey")
    enquiry = story.enquiry("submitted")
    op = story.operation("submitted", enquiry=enquiry)
    login(page, coordinator.username)
    page.goto(page.base + f"/console/enquiries/{enquiry.reference}/")
    card = page.locator(f"#op-{op.pk}")
    assert card.get_attribute("hx-trigger") == "every 2s"
    assert page.locator("#item-head .badge").inner_text() == "Submitted"
    # Let htmx poll at least once while nothing has changed.
    with page.expect_response(lambda r: f"/operations/{op.pk}/card/" in r.url):
        pass
    with transaction.atomic():
        locked = Operation.objects.select_for_update().get(pk=op.pk)
        locked.confirm(actor="system:tests", reason="CRM record CRM-1 confirmed")
        locked.save()
        row = Enquiry.objects.select_for_update().get(pk=enquiry.pk)
        row.confirm(actor="system:tests", reason="CRM record CRM-1 confirmed")
        row.save()
    page.locator(f"#op-{op.pk} .badge", has_text="Confirmed").wait_for()
    assert page.locator("#item-head .badge").inner_text() == "Confirmed"
    assert "Confirmed" in page.locator("#answers").inner_text()
    assert page.locator(f"#op-{op.pk}").get_attribute("hx-trigger") is None
