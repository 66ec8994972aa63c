"""The item page in a real Chromium: what an in-place (htmx) update leaves on the page."""

from __future__ import annotations

from django.utils import timezone

from tests.recovery.browser import BROWSER, login

pytestmark = BROWSER


def test_reconcile_in_place_refreshes_the_owner_box_and_the_journal(page, story, make_user):
    # After the card's in-place update the header said Confirmed while the Owner / Response due
    # box kept the old owner and due, and the page's journal had no row of the confirmation.
    from ledger import execution
    from ledger.connectors.base import LookupResult
    from ledger.models import Integration

    Integration.objects.filter(name="crm").update(settle_delay_seconds=0)
    coordinator = make_user("coordinator", username="casey")
    op = story.operation("unknown")
    login(page, coordinator.username)
    page.goto(page.base + f"/console/enquiries/{op.enquiry.reference}/?op={op.pk}")
    box = page.locator("#actions")
    before = box.inner_text()
    assert "Outcome unknown" in before and "admins" in before, before
    card = page.locator(f"#op-{op.pk}")
    card.locator("summary", has_text="Reconcile now").click()
    form = page.locator(f"#act-{op.pk}-reconcile")
    form.locator("textarea[name=reason]").fill("customer rang; checking the CRM")
    form.get_by_role("button", name="Reconcile now").click()
    card.locator(".messages.in-card").wait_for()
    page.evaluate("window.__kept = true")  # gone if the page is loaded again

    op.refresh_from_db()
    execution.record_lookup(
        op.pk,
        LookupResult(found=[{"id": "CRM-4242"}], status=200),
        None,
        actor="system:tests",
        started=timezone.now(),
        seen_attempts=op.attempt_count,
    )
    card.get_by_text("Reconciled", exact=True).wait_for()  # swapped in by htmx
    assert page.evaluate("window.__kept === true")  # in place, not a reload
    assert "Confirmed" in page.locator("#item-head").inner_text()
    owner_box = page.locator("#actions").inner_text()
    assert "Outcome unknown" not in owner_box, owner_box  # its runbook, no longer true
    assert "owner of its step" not in owner_box, owner_box  # the write is out of its queue
    journal = page.locator("#journal").inner_text()
    assert "confirmed" in journal, journal
