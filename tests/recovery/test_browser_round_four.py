"""Round four's pages in a real headless Chromium, at 1440 px and at 390 px, with long and
hostile values: the review page says why Approve is not offered (no category), the refused bulk
page offers a coordinator only what they may do, and a search longer than it reads says so."""

from __future__ import annotations

from django.urls import reverse

from tests.recovery.browser import BROWSER, HOSTILE, SCREENSHOTS, login, page_width

pytestmark = BROWSER

WORDS = "Choose a category before approving: the CRM needs one."
LONG = "Flat 4, " + "Larkspur-Row-Extension-" * 25


def shoot(page, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def test_the_review_page_says_why_approve_is_not_offered(page, story, make_user):
    enquiry = story.enquiry(
        "ready_for_review", category=None, subject=HOSTILE, message=LONG, name=HOSTILE
    )
    reviewer = make_user("reviewer", username="robin")
    login(page, reviewer.username)
    for width, suffix in ((1440, ""), (390, "-phone")):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(page.base + reverse("recovery:review-item", args=[enquiry.reference]))
        decide = page.locator("#actions")
        assert WORDS in decide.inner_text()
        assert decide.get_by_role("button", name="Approve revision").count() == 0
        assert page_width(page) <= width
        shoot(page, f"review-approve-needs-category{suffix}")


def test_a_refused_bulk_submit_offers_a_coordinator_only_what_they_may_do(page, story, make_user):
    story.operation("unknown", attention="lookup_failed")
    coordinator = make_user("coordinator", username="casey")
    login(page, coordinator.username)
    for width, suffix in ((1440, ""), (390, "-phone")):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(page.base + reverse("recovery:queue"))
        # Nothing chosen, no reason: sent as a form without the browser's own checks.
        page.evaluate("document.getElementById('bulk').submit()")
        page.wait_for_selector("h1:has-text('Nothing was done')")
        options = page.locator("#b-action option").all_inner_texts()
        assert "Retry" not in options and "Reconcile now" in options
        assert page_width(page) <= width
        shoot(page, f"bulk-refused-coordinator{suffix}")


def test_a_long_search_says_what_was_left_out(page, story, make_user):
    story.enquiry("ready_for_review", email="the-nunez-family@example.org")
    coordinator = make_user("coordinator", username="casey")
    login(page, coordinator.username)
    q = "nunez-family " + "x" * 200 + " " + HOSTILE
    for width, suffix in ((1440, ""), (390, "-phone")):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(page.base + reverse("recovery:enquiries"))
        page.fill("input[name=q]", q)
        page.press("input[name=q]", "Enter")
        page.wait_for_selector("text=A search reads its first 200 characters")
        assert page_width(page) <= width
        shoot(page, f"search-too-long{suffix}")
