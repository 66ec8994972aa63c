"""Issue 27 (the item's story at a glance, readable at 390 px): in a real headless Chromium, the
item page and the pages a coordinator reaches from it never scroll sideways on a phone-width
window. The top bar wraps; a wide table scrolls inside its own box."""

from __future__ import annotations

from tests.recovery.browser import BROWSER, SCREENSHOTS, login, unknown_after_a_lookup_503

pytestmark = BROWSER


def test_a_phone_width_window_never_scrolls_sideways(page, story, make_user):
    coordinator = make_user("coordinator", username="casey")
    op = unknown_after_a_lookup_503(story, coordinator, "taking it")
    page.set_viewport_size({"width": 390, "height": 844})
    login(page, coordinator.username)
    item = f"/console/enquiries/{op.enquiry.reference}/"
    for path in (item, "/console/", "/console/enquiries/", "/console/dashboard/"):
        page.goto(page.base + path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
    page.goto(page.base + item)
    # The journal scrolls in its own box rather than squeezing a column to a few letters.
    journal = page.locator("table.journal").last
    assert journal.evaluate("e => e.scrollWidth > e.clientWidth")
    for cell in journal.locator("td").all()[:10]:
        assert cell.bounding_box()["width"] >= 7 * 15 - 1  # 7rem at 15 px
    # The nav is whole, not cut off at the window's edge.
    for link in page.locator("header .nav a").all():
        box = link.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (link.inner_text(), box)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "item-phone.png"), full_page=True)
