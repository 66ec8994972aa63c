"""Issue 19's defects, one test (or a few) each, through the console's views.

Each fails on the code before its fix: the defect's number is in the test's name.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from intake.models import Enquiry, EnquiryState
from ledger import execution
from ledger.connectors.base import LookupResult
from ledger.models import Integration, JournalEntry, Op, Operation
from recovery import timefmt
from recovery.models import Queue, QueueVisit, ResponsePolicy
from recovery.tasks import escalate_overdue


def text(response) -> str:
    """The page's words, tags and runs of white space dropped."""
    html = response.content.decode()
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    words = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))
    return unescape(re.sub(r" ([,.:;])", r"\1", words))


def card(response, op) -> str:
    """The HTML of one operation's card on an item page."""
    html = response.content.decode()
    start = html.index(f'id="op-{op.pk}"')
    end = html.find('<section class="card op', start + 1)
    return html[start : end if end != -1 else len(html)]


def item_url(op):
    return reverse("recovery:enquiry", args=[op.enquiry.reference])


def crm_settles_at_once():
    Integration.objects.filter(name="crm").update(
        supports_lookup=True, supports_idempotency_key=True, settle_delay_seconds=0
    )


# --- 2: "Reconcile now" says what it will do, and then what it did ---------------------------


def test_2_reconcile_says_before_the_click_that_it_may_send_the_write_again(story, client_for):
    crm_settles_at_once()
    op = story.operation("unknown")
    page = client_for("coordinator").get(item_url(op))
    html = page.content.decode()
    form = html[html.index(f'id="act-{op.pk}-reconcile"') :].split("</details>", 1)[0]
    assert (
        "If the CRM has no such record, the write is sent again with the same idempotency key"
        in unescape(form)
    )
    assert "changes nothing there" not in text(page)


def test_2_and_5_the_card_says_reconciling_then_shows_what_happened(story, client_for):
    crm_settles_at_once()
    op = story.operation("unknown")
    coordinator = client_for("coordinator")
    response = coordinator.post(
        reverse("recovery:op-reconcile", args=[op.pk]), {"reason": "customer rang"}
    )
    assert response.status_code == 302

    pending = coordinator.get(reverse("recovery:op-card", args=[op.pk]))
    assert pending.status_code == 200
    assert 'hx-trigger="every 2s"' in pending.content.decode()  # htmx polls the card
    assert "Reconciling, started" in text(pending) and "by the-coordinator" in text(pending)

    op.refresh_from_db()
    execution.record_lookup(
        op.pk,
        LookupResult(found=[], status=200),
        None,
        actor="system:tests",
        started=timezone.now(),
        seen_attempts=op.attempt_count,
    )
    op.refresh_from_db()
    assert op.state == Op.APPROVED  # not found: the write goes again, same key
    retrying = text(coordinator.get(reverse("recovery:op-card", args=[op.pk])))
    assert "look-up: no record found" in retrying

    # The look-up of a second request finds the record: the card stops polling.
    other = story.operation("unknown")
    coordinator.post(reverse("recovery:op-reconcile", args=[other.pk]), {"reason": "look"})
    other.refresh_from_db()
    execution.record_lookup(
        other.pk,
        LookupResult(found=[{"id": "CRM-77"}], status=200),
        None,
        actor="system:tests",
        started=timezone.now(),
        seen_attempts=other.attempt_count,
    )
    done = coordinator.get(reverse("recovery:op-card", args=[other.pk]))
    assert "hx-trigger" not in done.content.decode()
    assert "Reconciled" in text(done) and "look-up: record found" in text(done)


def test_5_htmx_is_vendored_and_configured_without_inline_script(client_for, story):
    op = story.operation("unknown")
    html = client_for("coordinator").get(item_url(op)).content.decode()
    assert re.search(r'<script src="/static/js/htmx-[\d.]+\.min\.js" defer></script>', html)
    assert '<meta name="htmx-config"' in html and '"includeIndicatorStyles": false' in html
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "no inline script"
    assert "hx-on" not in html and ' style="' not in html


# --- 3: cancelling the CRM write of an approved enquiry ends the enquiry: a reviewer's call ----


def test_3_cancel_that_ends_the_enquiry_is_a_reviewers_decision_and_its_outcome(story, client_for):
    op = story.operation("failed")  # an approved enquiry's CRM write, failed
    assert op.enquiry.state == EnquiryState.APPROVED
    url = reverse("recovery:op-cancel", args=[op.pk])

    coordinator_page = text(client_for("coordinator").get(item_url(op)))
    assert (
        "Cancel and close the enquiry (it ends the enquiry: only a reviewer or an admin may)"
        in (coordinator_page)
    )
    assert client_for("coordinator").post(url, {"reason": "give up"}).status_code == 403
    op.refresh_from_db()
    assert op.state == Op.FAILED

    reviewer = client_for("reviewer")
    before = text(reviewer.get(item_url(op)))
    assert f"closes {op.enquiry.reference} as Rejected" in before
    response = reviewer.post(url, {"reason": "the resident withdrew it by phone"})
    assert response.status_code == 302
    op.refresh_from_db()
    enquiry = Enquiry.objects.get(pk=op.enquiry_id)
    assert op.state == Op.CANCELLED
    assert enquiry.state == EnquiryState.REJECTED
    withdraw = JournalEntry.objects.get(action="intake.enquiry.withdraw", enquiry=enquiry)
    assert withdraw.reason == "the resident withdrew it by phone"
    after = text(reviewer.get(item_url(op)))
    assert "Outcome Rejected: the-reviewer cancelled its delivery to the CRM" in after
    assert "“the resident withdrew it by phone”" in after


def test_3_a_write_cancelled_after_refused_attempts_says_so(story, client_for):
    op = story.operation("failed", attention="invalid", attempts=["invalid"])
    client_for("reviewer").post(
        reverse("recovery:op-cancel", args=[op.pk]), {"reason": "will not be fixed"}
    )
    words = text(client_for("reviewer").get(item_url(op)))
    assert "in the CRM: No. Cancelled after 1 attempt that the CRM did not accept" in words
    assert "Cancelled before anything reached" not in words


def test_3_a_coordinator_still_cancels_what_does_not_end_an_enquiry(story, client_for):
    op = story.operation("failed", action="notify.send", integration="notify")
    response = client_for("coordinator").post(
        reverse("recovery:op-cancel", args=[op.pk]), {"reason": "address bounced"}
    )
    assert response.status_code == 302
    op.refresh_from_db()
    assert op.state == Op.CANCELLED
    assert Enquiry.objects.get(pk=op.enquiry_id).state == EnquiryState.APPROVED


# --- 4: the result where the operator acted; input kept; the field named ----------------------


def test_4_success_message_is_in_the_card_acted_on(story, client_for):
    op = story.operation("unknown", attention="lookup_failed")
    coordinator = client_for("coordinator")
    response = coordinator.post(
        reverse("recovery:op-complete", args=[op.pk]),
        {"reason": "found it by hand", "external_id": "CRM-9"},
        follow=True,
    )
    assert response.status_code == 200
    assert "Completed by hand." in card(response, op)
    top = response.content.decode().split("<main", 1)[1].split("<h1", 1)[0]
    assert "Completed by hand." not in top


def test_4_a_refused_form_comes_back_open_with_what_was_typed(story, client_for):
    op = story.operation("unknown", attention="lookup_failed")
    response = client_for("coordinator").post(
        reverse("recovery:op-complete", args=[op.pk]),
        {"reason": "  ", "external_id": "CRM-1042 typed with care"},
    )
    assert response.status_code == 422
    here = card(response, op)
    assert 'value="CRM-1042 typed with care"' in here
    assert re.search(rf'<details class="action" open id="act-{op.pk}-complete_by_hand"', here)
    assert "Give a reason" in here

    long_reason = "checked with the resident on the phone; " * 20
    confirmed = story.operation("confirmed")
    response = client_for("coordinator").post(
        reverse("recovery:op-reconcile", args=[confirmed.pk]), {"reason": long_reason}
    )
    assert response.status_code == 409
    assert long_reason.strip() in unescape(card(response, confirmed))
    assert "“Reconcile now” is not possible now: this operation is confirmed." in text(response)


def test_4_edit_errors_name_the_field_and_keep_every_field(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    url = reverse("recovery:enquiry-edit", args=[enquiry.reference])
    response = client_for("reviewer").post(
        url,
        {
            "reason": "phone added",
            "email": "not-an-email",
            "phone": "07700 900123",
            "name": "A. Resident-with-a-long-name",
            "next": reverse("recovery:review-item", args=[enquiry.reference]),
        },
    )
    assert response.status_code == 422
    words = text(response)
    assert "Email: Enter a valid email address." in words
    html = response.content.decode()
    assert 'value="07700 900123"' in html and 'value="A. Resident-with-a-long-name"' in html
    assert 'value="not-an-email"' in html
    assert re.search(r">\s*phone added</textarea>", html)
    enquiry.refresh_from_db()
    assert enquiry.current_revision == 1


# --- 7: one runbook per situation -------------------------------------------------------------


@pytest.mark.parametrize("state", ["confirmed", "proposed", "cancelled", "approved"])
def test_7_no_runbook_for_an_operation_with_nothing_wrong(story, client_for, state):
    op = story.operation(state)
    assert "Runbook:" not in card(client_for("coordinator").get(item_url(op)), op)


def test_7_test_001_names_one_runbook(demo, client):
    client.force_login(demo["coordinator"])
    page = client.get(reverse("recovery:enquiry", args=["TEST-001"]))
    runbooks = set(re.findall(r'href="/console/runbooks/([\w-]+)/"', page.content.decode()))
    assert runbooks == {"reconciliation-queue"}


# --- 8: one owner per item, with why; Mine includes a queue I own -----------------------------


def test_8_escalated_item_one_owner_everywhere_and_still_mine(story, people, client_for):
    ResponsePolicy.objects.create(
        queue=Queue.UNKNOWN,
        owner=people["coordinator"],
        backup_owner=people["admin"],
        response_period=timedelta(hours=2),
    )
    op = story.operation("unknown", attention="lookup_failed")
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=3))
    assert escalate_overdue() == 1
    why = "escalated from the-coordinator at"

    coordinator = client_for("coordinator")
    queue = coordinator.get(reverse("recovery:queue"))
    row = re.search(rf'<tr[^>]*data-key="{op.pk}".*?</tr>', queue.content.decode(), re.S)[0]
    assert "the-admin" in row and why in unescape(row) and "overdue" in row
    page = coordinator.get(item_url(op))
    assert why in unescape(card(page, op))
    owner_cell = re.search(r"<dt>Owner</dt><dd>(.*?)</dd>", page.content.decode(), re.S)[1]
    assert "the-admin" in owner_cell and why in unescape(owner_cell)

    mine = coordinator.get(reverse("recovery:queue") + "?mine=1")
    assert f'data-key="{op.pk}"' in mine.content.decode()


# --- 13: no Retry on a refusal as invalid; /admin/ for non-staff; favicon; inspected queues ---


@pytest.mark.parametrize("role", ["coordinator", "admin"])
def test_13_no_retry_button_where_the_page_says_do_not_retry(story, client_for, role):
    op = story.operation("failed", attention="invalid")
    here = card(client_for(role).get(item_url(op)), op)
    assert "Do not retry" in here
    assert ">Retry" not in here


def test_13_admin_site_is_a_plain_403_for_a_signed_in_non_staff_person(client_for):
    response = client_for("coordinator").get("/admin/")
    assert response.status_code == 403
    assert "not for your role" in text(response)
    assert 'name="password"' not in response.content.decode()


def test_13_favicon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("/static/favicon.ico")


def test_13_opening_the_queue_inspects_only_queues_shown_to_someone_who_can_act(
    story, people, client_for
):
    story.operation("unknown", attention="lookup_failed")
    client_for("reviewer").get(reverse("recovery:queue"))  # a reviewer cannot act on it
    assert not QueueVisit.objects.exists()
    client_for("coordinator").get(reverse("recovery:queue"))
    assert set(QueueVisit.objects.values_list("queue", flat=True)) == {Queue.UNKNOWN}


# --- 14: one time format; copy ----------------------------------------------------------------


def test_14_one_time_format_local_24_hour_with_zone(settings):
    settings.TIME_ZONE = "Europe/London"
    winter = datetime(2026, 12, 1, 14, 12, tzinfo=UTC)
    summer = datetime(2026, 7, 1, 14, 12, tzinfo=UTC)
    assert timefmt.local(winter) == "1 Dec 2026, 14:12 GMT"
    assert timefmt.local(summer) == "1 Jul 2026, 15:12 BST"
    assert timefmt.local(summer, date=False) == "15:12 BST"
    assert timefmt.local(winter, seconds=True) == "1 Dec 2026, 14:12:00 GMT"
    assert timefmt.local("2026-12-01T14:12:00+00:00") == "1 Dec 2026, 14:12 GMT"
    assert timefmt.local(None) == ""


def test_14_copy_names_the_integration_and_has_no_nested_brackets(story, client_for):
    op = story.operation("failed", attention="invalid")
    words = text(client_for("coordinator").get(item_url(op)))
    assert "The CRM refused the request as invalid" in words
    assert "The crm" not in words
    unavailable = story.operation("failed", attention="retry_budget_exhausted")
    words = text(client_for("coordinator").get(item_url(unavailable)))
    assert "Retry (only an admin or a holder of the recovery permission may)" in words
    assert not re.search(r"\([^()]*\(", words), "nested brackets"


def test_14_escalation_reason_in_local_time(story, people, settings):
    ResponsePolicy.objects.create(
        queue=Queue.UNKNOWN, backup_owner=people["admin"], response_period=timedelta(hours=1)
    )
    op = story.operation("unknown")
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=2))
    escalate_overdue()
    reason = JournalEntry.objects.get(action="recovery.escalated").reason
    assert "UTC" not in reason and re.search(r"\d{1,2}:\d\d (GMT|BST)", reason), reason


def test_14_lock_out_page_says_the_wait_in_words():
    from django.template.loader import render_to_string

    html = render_to_string(
        "registration/locked_out.html",
        {"failure_limit": 5, "cooloff_timedelta": timedelta(minutes=15)},
    )
    assert "Try again in 15 min." in html
    assert "hours:minutes:seconds" not in html and "0:15:00" not in html


# --- 15: the drill report marks a failed row and links each reference -------------------------


def test_15_drill_report_marks_failures_and_links_references(settings):
    from recovery.drill.report import render_html

    settings.CONSOLE_URL = "https://console.example.org/"
    report = {
        "integration": "sandbox",
        "started_at": "2026-12-01T14:00:00+00:00",
        "finished_at": "2026-12-01T14:05:00+00:00",
        "run": "r1",
        "ran_by": "casey",
        "passed": False,
        "cases": [
            {
                "name": "ok case",
                "passed": True,
                "enquiry_reference": "HO-1",
                "input_reference": "e1",
            },
            {
                "name": "broken case",
                "passed": False,
                "enquiry_reference": "HO-2, HO-3, not/a ref",
                "input_reference": "e2",
            },
        ],
    }
    html = render_html(report)
    bad = re.search(r'<tr class="bad">.*?</tr>', html, re.S)[0]
    assert "✗ FAILED" in bad and "broken case" in bad
    assert '<a href="https://console.example.org/console/enquiries/HO-2/">HO-2</a>' in bad
    assert '<a href="https://console.example.org/console/enquiries/HO-3/">HO-3</a>' in bad
    assert ", not/a ref</small>" in bad  # shown, not linked, never a broken page
    assert "✗ FAILED" not in re.search(r'<tr class="ok">.*?</tr>', html, re.S)[0]
    assert "1 Dec 2026, 14:00 GMT" in html
