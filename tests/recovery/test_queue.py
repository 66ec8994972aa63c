"""The queue: what is in it, in which order, filtered how, and at what cost in queries."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from intake.models import Enquiry, Revision
from ledger.models import Integration, Operation, OperationState, payload_hash
from recovery import queue
from recovery.models import Queue, QueueVisit, ResponsePolicy
from recovery.queue import paging, sources
from recovery.tasks import escalate_overdue
from tests.recovery.pages import card, item_url


def bulk_queue(n, integrations_rows, category=None):
    """n queue items of every kind, made in bulk (states set directly: this is about reads)."""
    now = timezone.now()
    enquiries, ops = [], []
    for i in range(n):
        kind = i % 4
        state = ["submission_unknown", "approved", "needs_information", "ready_for_review"][kind]
        enquiries.append(
            Enquiry(
                reference=f"BULK-{i:05d}",
                source="website",
                message="bulk",
                state=state,
                category=None,
                state_changed_at=now - timedelta(minutes=i),
            )
        )
    Enquiry.objects.bulk_create(enquiries)
    Revision.objects.bulk_create(Revision(enquiry=e, number=1) for e in enquiries)
    for i, enquiry in enumerate(enquiries):
        if i % 4 in (0, 1):
            action = "crm.create_enquiry" if i % 8 < 4 else "notify.send"
            ops.append(
                Operation(
                    enquiry=enquiry,
                    action=action,
                    revision=1,
                    idempotency_key=f"{enquiry.pk}:{action}:r1",
                    payload={},
                    payload_hash=payload_hash({}),
                    integration=integrations_rows["crm" if action.startswith("crm") else "notify"],
                    state=OperationState.UNKNOWN if i % 4 == 0 else OperationState.FAILED,
                    state_changed_at=now - timedelta(minutes=i),
                )
            )
    Operation.objects.bulk_create(ops)
    from ledger.models import Attempt

    Attempt.objects.bulk_create(
        Attempt(operation=op, number=n, worker="bulk", outcome="transient")
        for op in ops
        for n in (1, 2)
    )
    # Paused long ago: the oldest, overdue row, so every kind is on the first page either way.
    Integration.objects.filter(name="documents").update(
        paused=True, paused_at=now - timedelta(days=3)
    )


def count_queue_queries(client):
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(reverse("recovery:queue"))
    assert response.status_code == 200
    return len(ctx), response


def test_query_count_is_the_same_for_10_and_1000_items(client_for, integrations_rows, people):
    ResponsePolicy.objects.create(queue="", owner=people["coordinator"])
    client = client_for("coordinator")
    client.get(reverse("recovery:queue"))  # warm the session and permission caches alike
    bulk_queue(10, integrations_rows)
    small, response = count_queue_queries(client)
    assert response.context["page"].count == 11  # 10 items + the paused integration
    Operation.objects.all().delete()
    Revision.objects.all().delete()
    Enquiry.objects.all().delete()
    bulk_queue(1000, integrations_rows)
    large, response = count_queue_queries(client)
    assert response.context["page"].count == 1001
    assert len(response.context["page"].rows) == queue.PAGE_SIZE
    kinds = {r.kind for r in response.context["page"].rows}
    assert kinds == {"operation", "enquiry", "integration"}
    assert small == large, f"{small} queries for 10 items, {large} for 1,000"


def test_every_kind_of_work_is_one_row(story, integrations_rows):
    unknown = story.operation("unknown")  # its enquiry is submission_unknown: one row, not two
    failed = story.operation("failed", action="notify.send", integration="notify")
    waiting = story.enquiry("needs_information")
    stuck = story.enquiry("submission_unknown")  # no open operation: the enquiry is the row
    unresolved = story.enquiry("ready_for_review", category=None)
    story.enquiry("ready_for_review")  # has a category: the review queue, not this one
    story.operation("confirmed")
    story.operation("submitted")
    Integration.objects.filter(name="documents").update(paused=True, paused_at=timezone.now())
    page = queue.page(queue.Filters(), 1)
    keys = {(r.kind, r.key, r.queue) for r in page.rows}
    assert keys == {
        ("operation", str(unknown.pk), Queue.UNKNOWN),
        ("operation", str(failed.pk), Queue.FAILED),
        ("enquiry", waiting.reference, Queue.NEEDS_INFORMATION),
        ("enquiry", stuck.reference, Queue.SUBMISSION_UNKNOWN),
        ("enquiry", unresolved.reference, Queue.UNRESOLVED),
        ("integration", "documents", Queue.PAUSED),
    }


def _age(obj, hours):
    type(obj).objects.filter(pk=obj.pk).update(
        state_changed_at=timezone.now() - timedelta(hours=hours)
    )


def test_overdue_first_then_customer_affecting_then_oldest(story, people):
    ResponsePolicy.objects.create(queue=Queue.FAILED, response_period=timedelta(hours=1))
    ResponsePolicy.objects.create(queue="", response_period=timedelta(days=30))
    old_internal = story.operation("failed", action="documents.extract", integration="documents")
    _age(old_internal, 50)  # failed > 1 h: overdue
    internal = story.operation("unknown", action="appointments.read", integration="appointments")
    _age(internal, 40)
    customer_new = story.operation("unknown")
    _age(customer_new, 2)
    customer_old = story.operation("unknown")
    _age(customer_old, 3)
    order = [r.key for r in queue.page(queue.Filters(), 1).rows]
    assert order == [str(o.pk) for o in (old_internal, customer_old, customer_new, internal)]


def test_filters(story, client_for, people):
    mine = story.operation("unknown")
    Operation.objects.filter(pk=mine.pk).update(owner=people["coordinator"])
    notify = story.operation("failed", action="notify.send", integration="notify")
    waiting = story.enquiry("needs_information")
    ResponsePolicy.objects.create(queue=Queue.NEEDS_INFORMATION, response_period=timedelta(0))
    client = client_for("coordinator")

    def keys(query):
        response = client.get(reverse("recovery:queue") + query)
        return {r.key for r in response.context["page"].rows}

    assert keys("?mine=1") == {str(mine.pk)}
    assert keys(f"?owner={people['coordinator'].pk}") == {str(mine.pk)}
    assert keys("?owner=none") == {str(notify.pk), waiting.reference}
    assert keys("?integration=notify") == {str(notify.pk)}
    assert keys("?state=failed") == {str(notify.pk)}
    assert keys("?state=needs_information") == {waiting.reference}
    assert keys("?overdue=1") == {waiting.reference}
    assert keys("?state=nonsense&owner=x") == {str(mine.pk), str(notify.pk), waiting.reference}


def test_owner_and_due_come_from_the_most_specific_policy(story, people, integrations_rows):
    ResponsePolicy.objects.create(queue="", owner=people["admin"], response_period=timedelta(1))
    ResponsePolicy.objects.create(
        queue=Queue.FAILED, owner=people["reviewer"], response_period=timedelta(hours=2)
    )
    ResponsePolicy.objects.create(
        queue=Queue.FAILED,
        integration=integrations_rows["notify"],
        owner=people["coordinator"],
        response_period=timedelta(hours=8),
    )
    crm = story.operation("failed")
    notify = story.operation("failed", action="notify.send", integration="notify")
    rows = {r.key: r for r in queue.page(queue.Filters(), 1).rows}
    assert rows[str(crm.pk)].owner == people["reviewer"]
    assert rows[str(notify.pk)].owner == people["coordinator"]
    notify.refresh_from_db()
    assert rows[str(notify.pk)].due == notify.state_changed_at + timedelta(hours=8)


def test_page_shows_what_was_attempted_and_the_last_attempt(story, client_for):
    op = story.operation(
        "unknown", attention="lookup_failed", attempts=["uncertain", "lookup_failed"]
    )
    html = client_for("coordinator").get(reverse("recovery:queue")).content.decode()
    assert op.enquiry.reference in html
    assert "Create the enquiry in the CRM" in html
    assert "lookup failed" in html
    assert f"/console/operations/{op.pk}/?action=reconcile" in html


def test_opening_the_queue_records_a_visit(client_for, people, story):
    # An empty queue opened alone has been seen whole; the unfiltered page counts a queue as
    # inspected only when one of its items was shown to someone who may act on it (issue 19).
    client_for("coordinator").get(reverse("recovery:queue") + "?state=unknown")
    assert list(QueueVisit.objects.values_list("queue", flat=True)) == [Queue.UNKNOWN]
    story.operation("failed")
    client_for("coordinator").get(reverse("recovery:queue"))
    assert set(QueueVisit.objects.values_list("queue", flat=True)) == {Queue.UNKNOWN, Queue.FAILED}
    client_for("reviewer").get(reverse("recovery:review"))
    assert QueueVisit.objects.filter(queue=Queue.REVIEW).exists()


@pytest.mark.parametrize("page", ["0", "-1", "abc", "999999"])
def test_bad_page_numbers_are_not_errors(client_for, page):
    assert client_for("admin").get(reverse("recovery:queue") + f"?page={page}").status_code == 200
    # An empty, unfiltered page showed no item: no queue counts as inspected (issue 19, 13).
    assert not QueueVisit.objects.exists()


def test_order_holds_across_groups_with_different_response_periods(story, integrations_rows):
    """Each (queue, integration) group is read oldest first with a LIMIT; the merge must still
    give overdue first, then what the customer feels, then the oldest, on every page."""
    ResponsePolicy.objects.create(queue=Queue.UNKNOWN, response_period=timedelta(hours=1))
    ResponsePolicy.objects.create(queue=Queue.FAILED, response_period=timedelta(hours=4))
    ResponsePolicy.objects.create(
        queue=Queue.FAILED,
        integration=integrations_rows["notify"],
        response_period=timedelta(hours=8),
    )
    ResponsePolicy.objects.create(queue="", response_period=timedelta(days=30))
    documents = {"action": "documents.extract", "integration": "documents"}
    overdue_internal = story.operation("failed", **documents)
    _age(overdue_internal, 5)  # failed > 4 h
    overdue_customer = story.operation("unknown")
    _age(overdue_customer, 2)  # unknown > 1 h
    notify_old = story.operation("failed", action="notify.send", integration="notify")
    _age(notify_old, 6)  # older than the rest, but notify's failures have 8 h
    customer_new = story.operation("unknown")
    _age(customer_new, 0.5)
    waiting = story.enquiry("needs_information")
    _age(waiting, 48)  # the default policy's 30 days
    internal_new = story.operation("failed", **documents)
    _age(internal_new, 3)
    expected = [
        str(overdue_customer.pk),
        str(overdue_internal.pk),
        str(notify_old.pk),
        str(customer_new.pk),
        waiting.reference,
        str(internal_new.pk),
    ]
    first = queue.page(queue.Filters(), 1)
    assert [r.key for r in first.rows] == expected
    assert [r.overdue for r in first.rows] == [True, True, False, False, False, False]
    paged = [r.key for n in (1, 2, 3) for r in queue.page(queue.Filters(), n, size=2).rows]
    assert paged == expected


def _more_groups(integrations_rows, people):
    """Internal work next to bulk_queue's: documents failures and integration-less suggestions,
    some owned, so that groups differ in period, owner and customer effect."""
    now = timezone.now()
    ops = []
    approved = Enquiry.objects.filter(state="approved").order_by("reference")
    for i, enquiry in enumerate(approved):
        action, integration, state = (
            ("documents.extract", integrations_rows["documents"], OperationState.FAILED)
            if i % 2
            else ("suggest.category", None, OperationState.UNKNOWN)
        )
        ops.append(
            Operation(
                enquiry=enquiry,
                action=action,
                revision=1,
                idempotency_key=f"{enquiry.pk}:{action}:r1",
                payload={},
                payload_hash=payload_hash({}),
                integration=integration,
                state=state,
                owner=people["coordinator"] if i % 3 == 0 else None,
                state_changed_at=now - timedelta(minutes=7 * i + 3),
            )
        )
    Operation.objects.bulk_create(ops)
    # Enquiries whose submission is unknown with no open operation: rows of their own.
    Enquiry.objects.bulk_create(
        Enquiry(
            reference=f"STUCK-{i:02d}",
            source="website",
            message="stuck",
            state="submission_unknown",
            state_changed_at=now - timedelta(minutes=11 * i + 1),
        )
        for i in range(8)
    )


@pytest.mark.parametrize("split", [False, True], ids=["registry-groups", "split-by-action"])
def test_pages_and_filters_agree_with_the_whole_queue(
    integrations_rows, people, monkeypatch, split
):
    """Page by page, and under every filter, the page (each branch read with a LIMIT, the stuck
    enquiries in a bounded second pass) gives what ordering the whole queue gives (all_rows:
    the same branches, each read whole)."""
    if split:  # as if the CRM carried internal actions too: its rows become two groups
        monkeypatch.setitem(sources.CUSTOMER_FLAGS, "crm", {True, False})
    ResponsePolicy.objects.create(queue="", owner=people["admin"], response_period=timedelta(1))
    ResponsePolicy.objects.create(queue=Queue.UNKNOWN, response_period=timedelta(minutes=20))
    ResponsePolicy.objects.create(
        queue=Queue.FAILED, owner=people["reviewer"], response_period=timedelta(minutes=45)
    )
    ResponsePolicy.objects.create(
        queue=Queue.FAILED,
        integration=integrations_rows["notify"],
        owner=None,
        response_period=timedelta(hours=2),
    )
    ResponsePolicy.objects.create(
        queue=Queue.NEEDS_INFORMATION, owner=people["admin"], response_period=timedelta(minutes=30)
    )
    ResponsePolicy.objects.create(queue=Queue.UNRESOLVED, response_period=timedelta(minutes=10))
    ResponsePolicy.objects.create(
        queue=Queue.SUBMISSION_UNKNOWN, response_period=timedelta(minutes=30)
    )
    bulk_queue(60, integrations_rows)
    _more_groups(integrations_rows, people)
    Operation.objects.filter(action="notify.send", state=OperationState.UNKNOWN).update(
        owner=people["coordinator"]
    )
    # Some operations were attempted, at times unrelated to when they entered the queue.
    for i, op in enumerate(Operation.objects.order_by("idempotency_key")):
        if i % 3:
            op.last_attempted_at = timezone.now() - timedelta(minutes=(i * 37) % 500)
            op.save(update_fields=["last_attempted_at"])
    now = timezone.now()

    def keys(rows):
        return [(r["q_kind"], r["q_key"]) for r in rows]

    expected = keys(queue.all_rows(now))
    assert len({k for k in expected}) == len(expected) > 60
    seen, number = [], 1
    while True:
        page = queue.page(queue.Filters(), number, now=now, size=7)
        seen += [(r.kind, r.key) for r in page.rows]
        if not page.has_next:
            break
        number += 1
    assert seen == expected
    assert page.count == len(expected) and page.pages == number

    coordinator = people["coordinator"].pk
    for filters in [
        queue.Filters(overdue=True),
        queue.Filters(owner=str(people["reviewer"].pk)),
        queue.Filters(owner=str(people["admin"].pk)),
        queue.Filters(owner="none"),
        queue.Filters(mine=True, user_id=coordinator),
        queue.Filters(queue=Queue.FAILED),
        queue.Filters(queue=Queue.UNKNOWN, overdue=True),
        queue.Filters(queue=Queue.UNRESOLVED),
        queue.Filters(integration="notify"),
        queue.Filters(integration="documents", overdue=True),
        queue.Filters(queue=Queue.NEEDS_INFORMATION, owner=str(people["admin"].pk)),
        queue.Filters(queue=Queue.SUBMISSION_UNKNOWN),
        queue.Filters(owner="none", overdue=True),
        # Sorted (issue 19): each group's own order still agrees with the chosen one.
        queue.Filters(sort="age"),
        queue.Filters(sort="due"),
        queue.Filters(sort="attempt"),
        queue.Filters(sort="due", queue=Queue.SUBMISSION_UNKNOWN),
        queue.Filters(sort="attempt", owner="none"),
        queue.Filters(sort="age", integration="crm"),
        # One group of what failed the same way.
        queue.Filters(group=queue.GroupKey("crm", OperationState.UNKNOWN, "", "", None)),
        queue.Filters(
            group=queue.GroupKey("notify", OperationState.FAILED, "", "", None), sort="attempt"
        ),
    ]:
        whole = keys(queue.all_rows(now, filters))
        assert whole, filters  # every filter here has rows: the comparison means something
        for size in (5, 50):
            page = queue.page(filters, 1, now=now, size=size)
            assert [(r.kind, r.key) for r in page.rows] == whole[:size], (filters, size)
            assert page.count == len(whole)
            assert page.has_next == (len(whole) > size)


def test_the_count_stops_at_its_cap_and_says_so(client_for, integrations_rows, monkeypatch):
    monkeypatch.setattr(paging, "COUNT_CAP", 5)
    bulk_queue(12, integrations_rows)  # 12 rows and the paused integration
    response = client_for("coordinator").get(reverse("recovery:queue"))
    page = response.context["page"]
    assert (page.count, page.more, page.count_label, page.pages) == (5, True, "5+", None)
    assert "<strong>5+</strong> waiting" in response.content.decode()
    seen, number = [], 1
    while True:  # paging goes on past the cap: a full page says whether another follows
        page = queue.page(queue.Filters(), number, size=4)
        seen += [r.key for r in page.rows]
        if not page.has_next:
            break
        number += 1
    assert len(seen) == len(set(seen)) == 13 and number == 4


def test_the_stuck_enquiries_are_read_only_as_far_back_as_the_page_leaves_room():
    """page() reads submission_unknown enquiries (customer-affecting, one period) in a second
    pass, bounded by the last row of the first: a bound may let in too many, never too few."""
    now = timezone.now()
    period = timedelta(hours=2)
    overdue_before = now - period

    def last(hours, overdue, customer):
        row = {"q_since": now - timedelta(hours=hours), "q_overdue": overdue}
        return [{**row, "q_customer": customer}]

    assert paging._late_bound([], 1, now, period) is None  # the page is not full
    assert paging._late_bound(last(5, 1, 1), 1, now, period) == now - timedelta(hours=5)
    assert paging._late_bound(last(1, 1, 1), 1, now, period) == overdue_before
    assert paging._late_bound(last(5, 1, 0), 1, now, period) == overdue_before
    assert paging._late_bound(last(5, 1, 0), 1, now, None) is False  # never overdue
    assert paging._late_bound(last(3, 0, 1), 1, now, period) == now - timedelta(hours=2)
    assert paging._late_bound(last(1, 0, 1), 1, now, period) == now - timedelta(hours=1)
    assert paging._late_bound(last(3, 0, 1), 1, now, None) == now - timedelta(hours=3)
    assert paging._late_bound(last(3, 0, 0), 1, now, period) is None


def test_escalated_item_one_owner_everywhere_and_still_mine(story, people, client_for):
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
    # Who did it and why, read as one aside: no bracket inside the owner's bracket.
    said = re.sub(r"<[^>]+>", "", unescape(owner_cell))
    assert "by the escalation job, as it was overdue" in said
    assert not re.search(r"\([^()]*\(", said), said

    mine = coordinator.get(reverse("recovery:queue") + "?mine=1")
    assert f'data-key="{op.pk}"' in mine.content.decode()


def test_opening_the_queue_inspects_only_queues_shown_to_someone_who_can_act(
    story, people, client_for
):
    story.operation("unknown", attention="lookup_failed")
    client_for("reviewer").get(reverse("recovery:queue"))  # a reviewer cannot act on it
    assert not QueueVisit.objects.exists()
    client_for("coordinator").get(reverse("recovery:queue"))
    assert set(QueueVisit.objects.values_list("queue", flat=True)) == {Queue.UNKNOWN}


def test_an_item_worked_from_its_own_page_counts_as_its_queue_looked_at(story, people, client_for):
    """A queue cleared from its items' pages (reached from the dashboard, a search, an e-mail)
    was looked at: the dashboard's "Last opened" says when, not "never". A person who cannot
    act on the item opens nothing."""
    from recovery.metrics import stale_queues

    ResponsePolicy.objects.create(queue=Queue.UNKNOWN, review_cadence=timedelta(hours=4))
    op = story.operation("unknown", attention="lookup_failed")
    item = reverse("recovery:enquiry", args=[op.enquiry.reference])
    client_for("reviewer").get(item)
    assert not QueueVisit.objects.exists()
    client_for("coordinator").get(item)
    flag = next(f for f in stale_queues(timezone.now()) if f.queue == Queue.UNKNOWN)
    assert flag.last_opened is not None
    page = client_for("admin").get(reverse("recovery:dashboard")).content.decode()
    row = re.search(r"<tr><td>Operation outcome unknown</td>.*?</tr>", page, re.S)[0]
    assert "never" not in row
