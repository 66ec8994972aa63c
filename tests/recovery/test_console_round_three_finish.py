"""Issue 27, what was left after its first two passes: each test fails on the code before its fix
(the defect's number is in the test's name)."""

from __future__ import annotations

import re
from html import unescape

from django.urls import reverse

from ledger.models import Integration, Operation


def page_html(response) -> str:
    assert response.status_code == 200
    return unescape(response.content.decode())


def card_html(html: str, op) -> str:
    start = html.index(f'id="op-{op.pk}"')
    end = html.find('<section class="card op', start + 1)
    return html[start : end if end != -1 else len(html)]


def duplicates(story, *records):
    enquiry = story.enquiry("submission_unknown")
    op = story.operation("unknown", enquiry=enquiry, attention="duplicate_records")
    Operation.objects.filter(pk=op.pk).update(result={"duplicates": list(records)})
    return Operation.objects.get(pk=op.pk)


# --- 13: the duplicate item names its records in the coordinator's view, linked ----------------


def test_13_the_coordinator_sees_each_duplicate_record_linked_to_the_destination(story, client_for):
    op = duplicates(story, "CRM-7", "CRM-8")
    base = Integration.objects.get(name="crm").base_url.rstrip("/")
    html = page_html(
        client_for("coordinator").get(reverse("recovery:enquiry", args=[op.enquiry.reference]))
    )
    for where in (card_html(html, op), html[html.index('id="answers"') :]):
        links = re.findall(r'<a class="ref" href="([^"]+)"[^>]*>([^<]+)</a>', where)
        assert (f"{base}/crm/enquiries/CRM-7", "CRM-7") in links
        assert (f"{base}/crm/enquiries/CRM-8", "CRM-8") in links
    assert "Records the CRM holds for it" in html


def test_13_a_record_name_that_is_no_path_segment_is_named_without_a_link(story, client_for):
    op = duplicates(story, "..", "CRM-8")
    html = page_html(
        client_for("coordinator").get(reverse("recovery:enquiry", args=[op.enquiry.reference]))
    )
    here = card_html(html, op)
    assert '<span class="ref">..</span>' in here
    assert re.search(r'<a class="ref" href="[^"]+/crm/enquiries/CRM-8"', here)


# --- 11: the demo's "approved, waiting" example says why it waits -----------------------------


def test_11_a_held_operation_says_it_waits_for_the_paused_integration(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    op = story.operation(
        "approved", enquiry=enquiry, action="documents.extract", integration="documents"
    )
    Operation.objects.filter(pk=op.pk).update(held=True)
    Integration.objects.filter(pk=op.integration_id).update(
        paused=True, pause_reason="store returns other tenants' files"
    )
    html = page_html(
        client_for("coordinator").get(reverse("recovery:enquiry", args=[enquiry.reference]))
    )
    here = card_html(html, op)
    assert "Approved, waiting: held because the Documents integration is paused" in here
    assert "store returns other tenants' files" in here
    assert reverse("recovery:backlog", args=[op.integration.name]) in here


# --- 2: every assignment says who made it, when and why, the demo's included -------------------


def test_2_the_demos_assignments_are_journalled_so_the_page_says_who_when_and_why(demo):
    """The demo gave TEST-001 to the coordinator without a journal entry: once its write was
    reconciled, the page said "assigned; no journal entry says by whom"."""
    from intake.models import Enquiry
    from ledger.models import JournalEntry
    from recovery import ownership

    owned = list(Enquiry.objects.filter(owner__isnull=False))
    assert owned
    for enquiry in owned:
        rows = JournalEntry.objects.filter(enquiry=enquiry).order_by("at", "id")
        why = ownership.owner_why(True, rows)
        assert "no journal entry" not in why, enquiry.reference
    test_001 = JournalEntry.objects.filter(enquiry__reference="TEST-001").order_by("at", "id")
    assert re.fullmatch(
        r"assigned by coordinator at .+: “taking it”", ownership.owner_why(True, test_001)
    )


# --- 14: the queue says what changed owner while it was open -----------------------------------


def test_14_an_open_queue_says_what_changed_owner_while_it_was_read(story, people, client_for):
    from datetime import timedelta

    from django.utils import timezone

    from recovery.models import Queue, ResponsePolicy
    from recovery.tasks import escalate_overdue

    ResponsePolicy.objects.create(
        queue=Queue.UNKNOWN,
        owner=people["coordinator"],
        backup_owner=people["admin"],
        response_period=timedelta(hours=2),
    )
    op = story.operation("unknown", attention="lookup_failed")
    coordinator = client_for("coordinator")
    html = page_html(coordinator.get(reverse("recovery:queue") + "?sort=oldest"))
    poll = re.search(r'<div id="moved-live" hx-get="([^"]+)" hx-trigger="every 20s"', html)
    assert poll, "the queue page polls for owner changes"
    url = poll.group(1)
    assert "While this page was open" not in page_html(coordinator.get(url))
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=3))
    assert escalate_overdue() == 1
    answer = page_html(coordinator.get(url))
    assert "1 item changed owner from you to the-admin (escalated: overdue)" in answer
    assert '<a href="/console/?sort=oldest">reload it</a>' in answer
    # It keeps polling from the same moment, and says it again until the page is reloaded.
    assert re.search(r'hx-get="[^"]*since=[^"]+" hx-trigger="every 20s"', answer)


def test_14_the_poll_takes_no_odd_moment_or_address(client_for):
    client = client_for("coordinator")
    assert client.get(reverse("recovery:queue-moved") + "?since=%00").status_code == 400
    for query in ("", "?since=2026-13-45T00:00", "?since=x&back=//evil.example/"):
        response = client.get(reverse("recovery:queue-moved") + query)
        assert response.status_code == 200
        assert "evil" not in response.content.decode()
        assert "While this page was open" not in response.content.decode()
