"""The console's configuration pages in a real headless Chromium at 1440x900: the backlog
review (nothing ticked, "select all" from static/js/select-all.js, a summary before release),
an integration's settings with hostile input, the enquiry search, and the notes for what an
address did not say. Screenshots go where tests/recovery/browser.py says (SCREENSHOTS)."""

from __future__ import annotations

import pytest

from ledger import services
from ledger.models import Integration, JournalEntry, Operation
from tests.recovery.browser import BROWSER, PASSWORD, SCREENSHOTS, WAIT_MS

pytestmark = BROWSER

LONG = "https://example.org/" + "a-very-long-unbroken-reason-" * 12
HOSTILE = '<script>alert("x")</script> “quotes” & ampersands ' + "Ω" * 20


@pytest.fixture
def wide(chromium, live_server):
    context = chromium.new_context(viewport={"width": 1440, "height": 900}, locale="en-GB")
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    page.base = live_server.url
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # A server error or a missing file (a script, a style); a refused form's 400 is expected, and
    # a missing /favicon.ico is another change's (issue 19, item 13).
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.url}")
            if r.status >= 500 or (r.status == 404 and not r.url.endswith("/favicon.ico"))
            else None
        ),
    )
    page.js_errors = errors
    yield page
    context.close()


def login(page, user):
    page.goto(page.base + "/accounts/login/")
    page.fill("input[name=username]", user.username)
    page.fill("input[name=password]", PASSWORD)
    page.click("form [type=submit]")
    page.wait_for_url(page.base + "/console/")


def shot(page, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1440, f"{name} is {width} px wide"


def test_backlog_select_all_summary_then_release(wide, story, people):
    admin = people["admin"]
    ops = [story.operation("approved") for _ in range(3)]
    services.pause_integration("crm", actor=admin, reason="mapping changed")
    services.resume_integration("crm", actor=admin, reason="mapping fixed")
    login(wide, admin)
    wide.goto(wide.base + "/console/integrations/crm/backlog/")
    boxes = wide.locator("input[name=operations]")
    assert boxes.count() == 3
    assert [boxes.nth(i).is_checked() for i in range(3)] == [False] * 3
    wide.check("input[data-select-all=operations]")
    assert [boxes.nth(i).is_checked() for i in range(3)] == [True] * 3
    assert wide.locator("[data-selected-count=operations]").inner_text() == "3 of 3 chosen"
    boxes.nth(1).uncheck()
    assert wide.locator("[data-selected-count=operations]").inner_text() == "2 of 3 chosen"
    wide.fill("textarea[name=reason]", LONG)
    shot(wide, "backlog")
    wide.click("text=Review what will be sent")
    wide.wait_for_selector("text=Send 2 held writes to CRM?")
    assert Operation.objects.filter(held=True).count() == 3  # nothing sent yet
    shot(wide, "backlog-confirm")
    wide.click("text=Send 2 writes now")
    wide.wait_for_selector("text=Released 2 writes")
    held = set(Operation.objects.filter(held=True).values_list("pk", flat=True))
    assert held == {ops[1].pk}
    assert wide.js_errors == []


def test_integration_settings_with_hostile_input(wide, people, integrations_rows):
    login(wide, people["admin"])
    wide.goto(wide.base + "/console/integrations/")
    wide.click("#integration-crm >> text=Edit settings")
    wide.fill("input[name=timeout_seconds]", "1 day, 0:00:00")
    wide.fill("input[name=settle_delay_seconds]", HOSTILE[:60])
    wide.fill("input[name=base_url]", "javascript:alert(1)")
    wide.fill("textarea[name=reason]", LONG)
    wide.click("text=Save the settings")
    wide.wait_for_selector("#id_timeout_seconds_error")
    text = wide.inner_text("main")
    assert "Timeout per call: “1 day, 0:00:00” is not a duration" in text
    assert "Address (base URL): The address must start with http:// or https://" in text
    assert wide.input_value("textarea[name=reason]") == LONG  # kept
    shot(wide, "integration-settings-refused")
    wide.fill("input[name=timeout_seconds]", "2.5 s")
    wide.fill("input[name=settle_delay_seconds]", "1 min 30 s")
    wide.fill("input[name=base_url]", "https://crm.example.org/api/")
    wide.fill("input[name=token]", "n3w-t0ken")
    wide.click("text=Save the settings")
    wide.wait_for_selector("text=CRM settings saved")
    assert "2.5 s per call" in wide.inner_text("#integration-crm")
    shot(wide, "integrations")
    row = Integration.objects.get(name="crm")
    assert (row.timeout_seconds, row.settle_delay_seconds, row.token) == (2.5, 90.0, "n3w-t0ken")
    entry = JournalEntry.objects.get(action="ledger.integration.configured")
    assert entry.evidence["token"] in ("set", "changed") and "n3w" not in str(entry.evidence)
    wide.goto(wide.base + "/console/integrations/crm/settings/")
    assert "→ 2.5 s" in wide.inner_text("main") and "n3w" not in wide.content()
    shot(wide, "integration-settings")
    assert wide.js_errors == []


def test_search_and_notes(wide, story, people):
    story.enquiry(
        "needs_information",
        name="Agnieszka Kowalska-" + "Wiśniewska" * 6,
        subject=HOSTILE,
        message="The green bin on Mill Lane was missed. " + LONG,
        email="a.kowalska@example.org",
    )
    for _ in range(3):
        story.enquiry("ready_for_review", subject="Parking permit")
    login(wide, people["coordinator"])
    wide.goto(wide.base + "/console/enquiries/?q=mill+lane&state=nonsense&page=%C2%B2")
    text = wide.inner_text("main")
    assert "state “nonsense” not understood; showing all." in text
    assert "Page “²” not understood; showing page 1." in text
    assert "1 found" in text
    shot(wide, "enquiry-search")
    wide.goto(wide.base + "/console/?state=bogus&page=99")
    text = wide.inner_text("main")
    assert "state “bogus” not understood; showing all queues." in text
    shot(wide, "queue-notes")
