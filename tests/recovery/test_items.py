"""The item pages (recovery.views.items): an enquiry's page, an operation's card and what each
says about the work, its actions and their consequences."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from ledger import execution
from ledger.connectors.base import LookupResult
from ledger.models import Integration, Operation, OperationState
from tests.recovery.pages import card, item_url, text


def crm_settles_at_once():
    Integration.objects.filter(name="crm").update(
        supports_lookup=True, supports_idempotency_key=True, settle_delay_seconds=0
    )


def test_reconcile_says_before_the_click_that_it_may_send_the_write_again(story, client_for):
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


def test_the_card_says_reconciling_then_shows_what_happened(story, client_for):
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
    assert op.state == OperationState.APPROVED  # not found: the write goes again, same key
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


def test_htmx_is_vendored_and_configured_without_inline_script(client_for, story):
    op = story.operation("unknown")
    html = client_for("coordinator").get(item_url(op)).content.decode()
    assert re.search(r'<script src="/static/js/htmx-[\d.]+\.min\.js" defer></script>', html)
    assert '<meta name="htmx-config"' in html and '"includeIndicatorStyles": false' in html
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "no inline script"
    assert "hx-on" not in html and ' style="' not in html


def test_success_message_is_in_the_card_acted_on(story, client_for):
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


@pytest.mark.parametrize("state", ["confirmed", "proposed", "cancelled", "approved"])
def test_no_runbook_for_an_operation_with_nothing_wrong(story, client_for, state):
    op = story.operation(state)
    assert "Runbook:" not in card(client_for("coordinator").get(item_url(op)), op)


def test_test_001_names_one_runbook(demo, client):
    client.force_login(demo["coordinator"])
    page = client.get(reverse("recovery:enquiry", args=["TEST-001"]))
    runbooks = set(re.findall(r'href="/console/runbooks/([\w-]+)/"', page.content.decode()))
    assert runbooks == {"reconciliation-queue"}


@pytest.mark.parametrize("role", ["coordinator", "admin"])
def test_no_retry_button_where_the_page_says_do_not_retry(story, client_for, role):
    op = story.operation("failed", attention="invalid")
    here = card(client_for(role).get(item_url(op)), op)
    assert "Do not retry" in here
    assert ">Retry" not in here


def test_copy_names_the_integration_and_has_no_nested_brackets(story, client_for):
    op = story.operation("failed", attention="invalid")
    words = text(client_for("coordinator").get(item_url(op)))
    assert "The CRM refused the request as invalid" in words
    assert "The crm" not in words
    unavailable = story.operation("failed", attention="retry_budget_exhausted")
    words = text(client_for("coordinator").get(item_url(unavailable)))
    assert "Retry (only an admin or a holder of the recovery permission may)" in words
    assert not re.search(r"\([^()]*\(", words), "nested brackets"


def _visible(html):
    html = re.sub(r"<details.*?</details>", "", html, flags=re.S)
    return unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def test_a_failed_lookup_is_judged_again_and_reconcile_is_the_main_action_not_the_handover(
    demo, client
):
    # TEST-001: its look-up failed with a 503 an hour ago. The CRM can be asked now, so the
    # coordinator's own Reconcile now is the safe step: no hand-over box above it.
    op = Operation.objects.get(enquiry__reference="TEST-001", action="crm.create_enquiry")
    client.force_login(demo["coordinator"])
    html = card(client.get(item_url(op)), op)
    assert 'class="handoff"' not in html
    summary = re.search(rf'id="act-{op.pk}-reconcile">\s*<summary class="([^"]*)"', html)
    assert summary and "primary" in summary[1].split()
    # The card's first main (primary) control is Reconcile now.
    first = re.search(r'<(\w+)[^>]*class="[^"]*\bprimary\b[^"]*"[^>]*>([^<]*)', html)
    assert first and first[2].strip() == "Reconcile now", first and first[0]
    words = _visible(html)
    assert "Safe now Reconcile now: the CRM could not be asked before" in words
    assert "can be looked up now: Reconcile now asks it." in words

    # Paused, the CRM cannot be asked now: the look-up by hand, and who may finish it.
    Integration.objects.filter(name="crm").update(paused=True)
    words = _visible(card(client.get(item_url(op)), op))
    assert "can be looked up now" not in words
    assert "Safe now Look in the CRM by hand" in words


def test_no_handover_box_on_an_item_someone_else_already_owns(demo, client):
    op = Operation.objects.get(enquiry__reference="TEST-001", action="crm.create_enquiry")
    Integration.objects.filter(name="crm").update(paused=True)  # the look-up by hand
    client.force_login(demo["coordinator"])
    assert 'class="handoff"' in card(client.get(item_url(op)), op)
    Operation.objects.filter(pk=op.pk).update(owner=demo["admin"])
    html = card(client.get(item_url(op)), op)
    assert 'class="handoff"' not in html
