"""The console in a real headless Chromium (Playwright's sync API), against a live server, a
real sandbox process and real `qcluster` processes.

Skipped with a clear message where Chromium is not installed; a failure when CI=true (CI
installs Debian's chromium, see .ci/run). Screenshots of the queue, the item page and the
dashboard go to test-artifacts/screenshots/; `make screenshots` writes them to
docs/screenshots/ (linked from the README).
"""

from __future__ import annotations

from intake.models import EnquiryState
from ledger.models import Operation, OperationState
from tests.ledger.conftest import crm_records
from tests.recovery.browser import (
    BROWSER,
    HOSTILE,
    LONG_URL,
    SCREENSHOTS,
    login,
    page_width,
)

pytestmark = BROWSER


def op_state(op):
    return Operation.objects.get(pk=op.pk).state


def test_coordinator_reconciles_an_unknown_item_to_confirmed(
    page, make_user, approved_enquiry, sandbox, run_queue, start_cluster, wait_for
):
    # The CRM commits, then answers too late (unknown); the automatic lookup fails (503): a
    # person must look. The record exists at the destination all along.
    sandbox.fault("crm.create", "timeout_after_commit", delay_ms=2500)
    sandbox.fault("crm.lookup", "error_503")
    enquiry, op = approved_enquiry()
    run_queue(until=lambda: Operation.objects.get(pk=op.pk).attention == "lookup_failed")
    assert op_state(op) == OperationState.UNKNOWN
    assert crm_records(sandbox, enquiry.reference) == 1
    cluster = start_cluster()
    coordinator = make_user("coordinator", username="casey")

    login(page, coordinator.username)
    row = page.locator(f"tr[data-key='{op.pk}']")
    assert "Unknown" in row.inner_text()
    row.get_by_role("link", name="Reconcile now").click()
    page.wait_for_url(f"**/console/enquiries/{enquiry.reference}/**")
    assert page.get_by_text("What is safe to do now?").is_visible()
    form = page.locator(f"#act-{op.pk}-reconcile")
    form.locator("textarea[name=reason]").fill("customer rang; checking the CRM")
    form.get_by_role("button", name="Reconcile now").click()
    page.locator(f"#op-{op.pk} .messages.in-card").get_by_text(
        "Reconciliation requested"
    ).wait_for()

    wait_for(
        lambda: op_state(op) == OperationState.CONFIRMED,
        timeout=60,
        message=f"the cluster reconciles the operation\n{cluster.log()[-3000:]}",
    )
    page.reload()
    assert page.locator(f"#op-{op.pk} .badge").first.inner_text() == "Confirmed"
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED
    assert crm_records(sandbox, enquiry.reference) == 1  # found, never sent twice
    assert sandbox.stats()["requests"]["crm.create"] == 1


def test_reviewer_approves_and_the_crm_record_appears(
    page, make_user, make_enquiry, integrations, sandbox, start_cluster, wait_for
):
    enquiry = make_enquiry(message="The recycling bin on Elm Road was not emptied.")
    cluster = start_cluster()
    approver = make_user("reviewer", username="robin")

    login(page, approver.username)
    page.goto(page.base + "/console/review/")
    page.get_by_role("link", name=enquiry.reference).click()
    page.get_by_text("The customer's words").wait_for()
    page.locator("#act-rev-approve_revision summary").click()
    form = page.locator("#act-rev-approve_revision form")
    form.locator("textarea[name=reason]").fill("fields checked against the message")
    form.get_by_role("button", name="Approve revision").click()
    page.get_by_text("Approved: delivery to the CRM is queued.").wait_for()

    op = Operation.objects.get(enquiry=enquiry, action="crm.create_enquiry")
    wait_for(
        lambda: op_state(op) == OperationState.CONFIRMED,
        timeout=60,
        message=f"the cluster delivers the approved enquiry\n{cluster.log()[-3000:]}",
    )
    assert crm_records(sandbox, enquiry.reference) == 1
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.CONFIRMED


def test_a_long_unbroken_reason_does_not_widen_the_item_page(page, story, make_user):
    # Issue 19, defect 6: a reason holding a URL made the page 15,000 px wide.
    from ledger.services import reassign_operation

    coordinator = make_user("coordinator", username="casey")
    op = story.operation("unknown", attention="lookup_failed")
    reassign_operation(op.pk, actor=coordinator, reason=LONG_URL, owner=coordinator)
    login(page, coordinator.username)
    page.goto(page.base + f"/console/enquiries/{op.enquiry.reference}/")
    page.get_by_text("Journal").first.wait_for()
    assert "TEST001xTEST001x" in page.content()
    assert page_width(page) <= 1440


def test_reconcile_result_shows_in_the_card_and_updates_in_place(page, story, make_user):
    # Issue 19, defects 4 and 5: the result where the operator acted, a pending state, and the
    # card updated by htmx (no reload) when the look-up's outcome is recorded.
    from django.utils import timezone

    from ledger import execution
    from ledger.connectors.base import LookupResult
    from ledger.models import Integration

    Integration.objects.filter(name="crm").update(settle_delay_seconds=0)
    coordinator = make_user("coordinator", username="casey")
    op = story.operation("unknown")
    login(page, coordinator.username)
    page.goto(page.base + f"/console/enquiries/{op.enquiry.reference}/?op={op.pk}")
    card = page.locator(f"#op-{op.pk}")
    card.locator("summary", has_text="Reconcile now").click()
    form = page.locator(f"#act-{op.pk}-reconcile")
    assert "the write is sent again with the same idempotency key" in form.inner_text()
    form.locator("textarea[name=reason]").fill("customer rang; " + LONG_URL)
    form.get_by_role("button", name="Reconcile now").click()

    message = card.locator(".messages.in-card")
    message.wait_for()
    box = message.bounding_box()
    assert box is not None and 0 <= box["y"] <= 900 - box["height"], box  # in sight
    assert "Reconciling, started" in card.inner_text()
    assert page_width(page) <= 1440

    op.refresh_from_db()
    execution.record_lookup(
        op.pk,
        LookupResult(found=[{"id": "CRM-4242"}], status=200),
        None,
        actor="system:tests",
        started=timezone.now(),
        seen_attempts=op.attempt_count,
    )
    card.get_by_text("Reconciled", exact=True).wait_for()  # swapped in by htmx, no reload
    assert "look-up: record found" in card.inner_text()
    assert card.locator(".badge").first.inner_text() == "Confirmed"


def test_screenshots_of_the_queue_item_page_and_dashboard(page, monkeypatch):
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from ledger.services import reassign_operation

    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-for-screenshots")
    call_command("seed_demo", stdout=StringIO())
    # Long and hostile values where people type them: a reason holding a URL and markup.
    crm_write = Operation.objects.get(enquiry__reference="TEST-001", action="crm.create_enquiry")
    reassign_operation(
        crm_write.pk,
        actor=get_user_model().objects.get(username="admin"),
        reason=f"{HOSTILE} see {LONG_URL}",
        owner=crm_write.owner,
    )
    login(page, "coordinator", "demo-pass-for-screenshots")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shots = {
        "queue": "/console/",
        "item": "/console/enquiries/TEST-001/",
        "dashboard": "/console/dashboard/",
    }
    for name, url in shots.items():
        page.goto(page.base + url)
        assert page.locator("main.page").is_visible()
        assert "Traceback" not in page.content()
        assert page_width(page) <= 1440, name
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    for name in shots:
        assert (SCREENSHOTS / f"{name}.png").stat().st_size > 10_000


def test_the_console_says_throttled_not_failed(page, make_user, approved_enquiry, sandbox):
    """A 429 with Retry-After: the queue, the item page and the integrations page say the CRM
    asked to wait and until when; nothing is in the failure queue."""
    from datetime import timedelta

    from django.utils import timezone

    from ledger import tasks
    from ledger.models import Integration

    sandbox.fault("crm.create", "error_429", delay_ms=3000)
    enquiry, op = approved_enquiry(message="<script>alert(1)</script> " + "Bins " * 80)
    assert tasks.execute_operation(str(op.pk)) == "throttled"
    # Held for the length of the test, with a destination's long, hostile reason.
    until = timezone.now() + timedelta(hours=1)
    reason = "429: <b>slow down</b> " + "x" * 250
    Integration.objects.filter(name="crm").update(
        throttled_until=until, throttle_reason=reason, max_requests_per_second=40, max_in_flight=8
    )
    clock = f"{timezone.localtime(until):%H:%M:%S}"
    admin = make_user("admin", username="avery")

    page.set_viewport_size({"width": 1440, "height": 900})
    login(page, admin.username)
    notice = page.locator(".card.waiting")
    assert f"CRM: throttled by the CRM until {clock}." in notice.inner_text()
    assert page.get_by_text("Nothing is waiting").is_visible()  # not a failure row
    page.screenshot(path=str(SCREENSHOTS / "throttled-queue.png"), full_page=True)

    page.goto(page.base + f"/console/enquiries/{enquiry.reference}/")
    assert page.get_by_text(f"Throttled by the CRM until {clock}").is_visible()
    assert page.get_by_role("link", name="Runbook: Throttled by a destination").is_visible()
    page.screenshot(path=str(SCREENSHOTS / "throttled-item.png"), full_page=True)

    page.goto(page.base + "/console/integrations/")
    assert page.get_by_text("<b>slow down</b>", exact=False).is_visible()  # shown as text
    page.screenshot(path=str(SCREENSHOTS / "throttled-integrations.png"), full_page=True)


def test_every_page_keeps_to_the_content_security_policy(page, monkeypatch):
    """Each console page and the admin's main pages load under the policy: the page fixture
    fails on any CSP violation in the console log; the policy header is there on each."""
    from io import StringIO

    from django.core.management import call_command

    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-for-csp")
    call_command("seed_demo", stdout=StringIO())
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.get(username="admin")
    login(page, "admin", "demo-pass-for-csp")
    for url in [
        "/console/",
        "/console/review/",
        "/console/enquiries/",
        "/console/enquiries/TEST-001/",
        "/console/dashboard/",
        "/console/integrations/",
        "/console/integrations/crm/backlog/",
        "/console/drill/",
        "/console/runbooks/",
        "/admin/",
        "/admin/intake/enquiry/",
        f"/admin/auth/user/{admin.pk}/change/",
    ]:
        response = page.goto(page.base + url)
        assert response.status == 200, url
        policy = response.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy, policy
        assert "Traceback" not in page.content()
    # The policy is enforced, not only sent: an inline style added to a page is refused (in a
    # context of its own, so this deliberate violation is not the page fixture's business).
    other = page.context.browser.new_context()
    try:
        probe = other.new_page()
        probe.goto(page.base + "/accounts/login/")
        directive = probe.evaluate(
            """() => new Promise(resolve => {
                document.addEventListener(
                    "securitypolicyviolation", e => resolve(e.violatedDirective)
                );
                const style = document.createElement("style");
                style.textContent = "p { color: red }";
                document.head.appendChild(style);
            })"""
        )
    finally:
        other.close()
    assert directive.startswith("style-src")


# --- Issue 19: the queue as a working list ----------------------------------------------------


def _lookups_failed_on_503(story, n):
    """n CRM writes whose outcome is unknown and whose look-up failed on the same 503."""
    from datetime import timedelta

    from django.utils import timezone

    ops = []
    for i in range(n):
        op = story.operation("unknown", attention="lookup_failed")
        Operation.objects.filter(pk=op.pk).update(
            last_error_class="transient",
            last_error_status=503,
            state_changed_at=timezone.now() - timedelta(hours=4, minutes=i),
        )
        ops.append(op)
    return ops


def test_coordinators_morning_queue_group_bulk_reconcile_results(page, story, make_user):
    from ledger.models import JournalEntry

    ops = _lookups_failed_on_503(story, 6)
    other = story.operation("failed", attention="invalid")  # another cause: not in the group
    coordinator = make_user("coordinator", username="casey")
    login(page, coordinator.username)

    groups = page.locator(".failure-groups")
    line = groups.get_by_role("link", name="CRM 503 - look-up failed - 6 items, oldest 4 h")
    line.click()
    page.wait_for_url("**group=crm~unknown~lookup_failed~transient~503**")
    assert page.locator("tr[data-row]").count() == 6
    assert str(other.pk) not in page.content()

    bulk = page.locator("#bulk")
    bulk.get_by_label("The whole group").check()
    bulk.locator("#b-action").select_option("reconcile")
    reason = "CRM search was down 08:50-09:30 (status page); asking again"
    bulk.locator("#b-reason").fill(reason)
    bulk.get_by_role("button", name="Apply").click()

    page.get_by_role("heading", name="Reconcile now: 6 done, 0 refused").wait_for()
    assert page.locator("table.bulk-results tr.done").count() == 6
    assert reason in page.content()
    assert page_width(page) <= 1440
    journalled = JournalEntry.objects.filter(
        action="recovery.operation.reconcile_requested", reason=reason
    )
    assert sorted(journalled.values_list("subject_id", flat=True)) == sorted(
        str(op.pk) for op in ops
    )


def test_keyboard_skip_link_j_k_enter_x_and_assign_to_me(page, story, make_user):
    first, second = _lookups_failed_on_503(story, 2)
    coordinator = make_user("coordinator", username="casey")
    login(page, coordinator.username)

    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    assert skip.evaluate("el => el === document.activeElement") and skip.is_visible()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "content"

    rows = page.locator("tr[data-row]")
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert "current" in rows.nth(1).get_attribute("class")
    page.keyboard.press("x")
    assert rows.nth(1).locator("input[type=checkbox]").is_checked()
    assert page.locator("[data-selected-count=item]").inner_text() == "1 of 2 chosen"
    page.keyboard.press("k")
    assert "current" in rows.nth(0).get_attribute("class")
    # Tab from the row's link reaches its "Assign to me" without a mouse.
    for _ in range(12):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "Assign to me":
            break
    page.keyboard.press("Enter")
    page.get_by_text("is yours now").wait_for()
    taken = [o for o in (first, second) if Operation.objects.get(pk=o.pk).owner == coordinator]
    assert len(taken) == 1

    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.wait_for_url("**/console/enquiries/**")


def test_reviewers_morning_review_list_diff_approve_next(page, story, make_user):
    from datetime import timedelta

    from django.utils import timezone

    from intake import services as intake_services
    from intake.models import Enquiry

    editor = make_user("reviewer", username="robin")
    reviewer = make_user("reviewer", username="riley")
    first = story.enquiry("ready_for_review", reference="ENQ-FIRST")
    story.enquiry("ready_for_review", reference="ENQ-SECOND")
    Enquiry.objects.filter(pk=first.pk).update(state_changed_at=timezone.now() - timedelta(hours=3))
    intake_services.revise_enquiry(
        first.pk,
        actor=editor,
        reason="customer phoned: new number",
        fields={"phone": "+44 7700 900123"},
    )
    Enquiry.objects.filter(pk=first.pk).update(state_changed_at=timezone.now() - timedelta(hours=2))
    login(page, reviewer.username)

    page.goto(page.base + "/console/review/")
    page.get_by_role("link", name="ENQ-FIRST").click()
    diff = page.locator("section.diff")
    assert "Revision 2 against revision 1" in diff.inner_text()
    assert (
        "Edited by robin" in diff.inner_text()
        and "customer phoned: new number" in diff.inner_text()
    )
    changed = diff.locator("tr.changed")
    assert changed.count() == 1 and "+44 7700 900123" in changed.inner_text()

    page.locator("summary", has_text="Approve revision").click()
    form = page.locator("#act-rev-approve_revision")
    form.locator("textarea[name=reason]").fill("number matches the call log")
    form.get_by_role("button", name="Approve revision").click()

    page.wait_for_url("**/console/review/ENQ-SECOND/#content")
    assert "ENQ-FIRST: Approved" in page.content() and "Next waiting: ENQ-SECOND" in page.content()
    assert Enquiry.objects.get(pk=first.pk).state == EnquiryState.APPROVED
    assert page.locator("section.diff h2").inner_text() == "Revision 1, as received"


def test_screenshots_of_the_working_list(page, story, make_user):
    """The group opened, the bulk results, the review diff: long and hostile values."""
    from intake import services as intake_services

    ops = _lookups_failed_on_503(story, 3)
    story.operation("failed", attention="invalid")
    coordinator = make_user("coordinator", username="casey-" + "x" * 60)
    editor = make_user("reviewer", username="robin")
    reviewer = make_user("reviewer", username="riley")
    enquiry = story.enquiry("ready_for_review", reference="ENQ-SHOT")
    intake_services.revise_enquiry(
        enquiry.pk,
        actor=editor,
        reason=f"{HOSTILE} {LONG_URL}",
        fields={"phone": "+44 7700 900123", "subject": HOSTILE, "email": "x" * 60 + "@example.org"},
    )
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    login(page, coordinator.username)
    key = "crm~unknown~lookup_failed~transient~503"
    page.goto(page.base + f"/console/?group={key}")
    page.locator("tr[data-row]").first.wait_for()
    assert page_width(page) <= 1440
    page.screenshot(path=str(SCREENSHOTS / "queue-group.png"), full_page=True)
    page.locator("input[data-select-all=item]").check()
    # The bulk menu offers only what may be done to these rows: no Cancel for an unknown write.
    assert page.locator("#b-action option[value=cancel]").count() == 0
    page.locator("#b-action").select_option("reconcile")
    page.locator("#b-reason").fill(f"{HOSTILE} {LONG_URL}")
    page.get_by_role("button", name="Apply").click()
    page.get_by_role("heading", name="Reconcile now: 3 done, 0 refused").wait_for()
    assert page_width(page) <= 1440
    page.screenshot(path=str(SCREENSHOTS / "bulk-results.png"), full_page=True)
    assert all(op_state(op) == OperationState.UNKNOWN for op in ops)

    page.context.clear_cookies()
    login(page, reviewer.username)
    page.goto(page.base + "/console/review/ENQ-SHOT/")
    page.locator("section.diff").wait_for()
    assert page_width(page) <= 1440
    page.screenshot(path=str(SCREENSHOTS / "review-diff.png"), full_page=True)
