"""The setup pages and the admins' banner in a real headless Chromium at 1440x900, from a
fresh install (a superuser only), with long, hostile and empty values; screenshots beside the
other browser tests' (SCREENSHOTS)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from intake.models import Category
from recovery import setup
from tests.recovery.browser import BROWSER, PASSWORD
from tests.recovery.test_browser_config import HOSTILE, LONG, shot, wide  # noqa: F401

pytestmark = BROWSER


def test_a_fresh_install_banner_then_the_setup_pages(wide):  # noqa: F811
    from ledger.integrations import ensure_integrations

    ensure_integrations()
    users = get_user_model().objects
    root = users.create_superuser("root", "root@example.org", PASSWORD)
    wide.goto(wide.base + "/accounts/login/")
    wide.fill("input[name=username]", "root")
    wide.fill("input[name=password]", PASSWORD)
    wide.click("form [type=submit]")
    wide.wait_for_url(wide.base + "/console/")
    banner = wide.locator("section.readiness")
    assert "Not ready to go live: 8 things to set up" in banner.inner_text()
    shot(wide, "setup-banner-fresh-install")

    wide.goto(wide.base + "/console/setup/")
    assert "not set: nobody owns it" in wide.content()
    shot(wide, "setup-empty")

    # A queue's form refused: a period people do not write, an invisible reason.
    wide.goto(wide.base + "/console/setup/queues/failed/")
    wide.fill("input[name=response_period]", "soon-" + "9" * 50)
    wide.fill("textarea[name=reason]", "\u200b")
    wide.click("form.settings [type=submit]")
    assert "Nothing was saved" in wide.content()
    shot(wide, "setup-queue-refused")

    # People with long and hostile names, one with every role.
    odd = users.create_user("x" * 150, password=PASSWORD)
    hostile = users.create_user('<b>"bold"</b>&amp;', password=PASSWORD, is_active=False)
    setup.set_roles(odd, actor=root, reason=LONG, roles=["coordinator", "reviewer", "admin"])
    setup.set_roles(hostile, actor=root, reason=HOSTILE, roles=["reviewer"], may_recover=True)
    wide.goto(wide.base + "/console/people/")
    assert "<b>" not in wide.locator("table").inner_html().replace("&lt;b&gt;", "")
    shot(wide, "people")
    wide.goto(wide.base + f"/console/people/{odd.pk}/")
    shot(wide, "person-with-history")

    # A category with a long name and many keywords, then a saved queue row.
    setup.configure_category(
        "waste",
        actor=root,
        reason=HOSTILE,
        changes={"name": LONG[:120], "keywords": "\n".join(["recycling"] * 40)},
    )
    setup.configure_policy(
        "", actor=root, reason=LONG, changes={"owner": odd, "backup_owner": hostile}
    )
    wide.goto(wide.base + "/console/setup/")
    shot(wide, "setup-filled")
    wide.goto(wide.base + "/console/setup/categories/waste/")
    shot(wide, "category-edit")
    wide.goto(wide.base + "/console/dashboard/")
    assert "The purge has not run yet" in wide.content()
    shot(wide, "dashboard-purge")
    assert Category.objects.get().slug == "waste"
    assert wide.js_errors == []
