"""What the console's browser tests share: Chromium (Debian's, driven by Playwright's sync
API), a page that fails its test on any Content-Security-Policy violation, logging in, and
where screenshots go. ``chromium`` and ``page`` are fixtures of tests/recovery/conftest.py; a
browser test module says ``pytestmark = BROWSER``.

Chromium missing is a skip with a clear message, and a failure when CI=true (CI installs
Debian's chromium, see .ci/run). `make screenshots` writes the pictures to docs/screenshots/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings

# A browser test's marks: a live server needs a transactional database, and every browser
# test logs in as a role (the roles remade after the previous test's flush).
BROWSER = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("roles"),
]


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# `make screenshots` refreshes the committed pictures; an ordinary run writes beside them in
# test-artifacts/ (git-ignored), so running the suite never leaves the tree changed.
SCREENSHOTS = Path(
    os.environ.get("SCREENSHOTS_DIR") or Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"
)
PASSWORD = "pw-for-tests-only"  # tests/conftest.py make_user
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def chromium():
    if not Path(CHROMIUM).exists():
        message = (
            f"Chromium is not installed at {CHROMIUM}: the browser tests need Debian's package "
            "(apt-get install chromium)."
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message + " CI=true: this is a failure, not a skip.")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread for as long as the browser
    # lives; the ORM calls made between browser steps (and the test database's flush after each
    # test) are still plain synchronous code, which Django would otherwise refuse.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => {
  console.error(`Content Security Policy violation: ${e.violatedDirective} ${e.blockedURI}`
    + ` at ${e.sourceFile}:${e.lineNumber} sample=${e.sample}`);
});
"""


@pytest.fixture
def page(chromium, live_server):
    """A page in a fresh context. Every console message is kept: a Content-Security-Policy
    violation (an inline script or style, something from elsewhere) fails the test."""
    context = chromium.new_context(viewport={"width": 1440, "height": 900}, locale="en-GB")
    context.set_default_timeout(WAIT_MS)
    # Chromium logs most violations to the console, but not all that a swap makes (an element
    # htmx inserts, an attribute it sets): the page's own violation event catches every one,
    # on load and while a card polls.
    context.add_init_script(CSP_LISTENER)
    page = context.new_page()
    page.base = live_server.url
    page.console_messages = []
    page.on("console", lambda message: page.console_messages.append(message.text))
    yield page
    context.close()
    violations = [m for m in page.console_messages if "Content Security Policy" in m]
    assert not violations, "CSP violations:\n" + "\n".join(violations)


def login(page, username, password=PASSWORD):
    page.goto(page.base + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form [type=submit]")
    page.wait_for_url(page.base + "/console/")


# No character a browser may break a line at: one word about 9,000 px long.
LONG_URL = "https://crm.example.org/enquiries/" + "TEST001x" * 150
HOSTILE = '<script>alert("x")</script> “quoted” ' + "Ä" * 40


def page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def unknown_after_a_lookup_503(story, owner, reason):
    """A CRM write in *unknown*: its call timed out, its look-up was answered 503; ``owner``
    has taken it with ``reason``. The item page's story then has every kind of line."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger import services
    from ledger.models import Attempt

    op = story.operation("unknown", attention="lookup_failed")
    now = timezone.now()
    for number, (kind, outcome, status) in enumerate(
        [("call", "uncertain", None), ("lookup", "lookup_failed", 503)], start=1
    ):
        Attempt.objects.create(
            operation=op,
            number=number,
            kind=kind,
            worker="w",
            outcome=outcome,
            response_status=status,
            started_at=now + timedelta(milliseconds=number),
        )
    services.reassign_operation(op.pk, actor=owner, reason=reason, owner=owner)
    return op
