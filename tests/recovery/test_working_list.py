"""Issue 19, "what makes the queue a working list": take it, groups, bulk actions, sorts and
quick views, through the views (the browser walks are in test_browser.py)."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from ledger.models import JournalEntry, Operation, OperationState
from recovery.models import ResponsePolicy
from recovery.operator_actions import OPERATION_ACTIONS


def _failed_the_same_way(story, n, *, status=503, attention="retry_budget_exhausted", hours=4):
    ops = []
    for i in range(n):
        op = story.operation("failed", attention=attention)
        Operation.objects.filter(pk=op.pk).update(
            last_error_class="transient" if status == 503 else "invalid",
            last_error_status=status,
            state_changed_at=timezone.now() - timedelta(hours=hours, minutes=-i),
        )
        ops.append(op)
    return ops


def _journal(op, action):
    return JournalEntry.objects.filter(subject_id=str(op.pk), action=action)


# --- Take it --------------------------------------------------------------------------------


def test_assign_to_me_on_a_queue_row_takes_it_with_the_reason_taking_it(story, client_for, people):
    op = story.operation("unknown")
    client = client_for("coordinator")
    page = client.get(reverse("recovery:queue")).content.decode()
    take = reverse("recovery:op-take", args=[op.pk])
    assert f'action="{take}"' in page and "Assign to me" in page

    response = client.post(take, {"next": "/console/?sort=age"})

    assert response.status_code == 302 and response["Location"] == "/console/?sort=age"
    op.refresh_from_db()
    assert op.owner == people["coordinator"]
    entry = _journal(op, "recovery.operation.reassigned").get()
    assert entry.reason == "taking it" and entry.evidence["to"] == "the-coordinator"
    # Mine now: the row offers no second "Assign to me".
    page = client.get(reverse("recovery:queue")).content.decode()
    assert f'action="{take}"' not in page


def test_assign_to_me_on_the_item_page_and_its_refusals(story, client_for, people):
    enquiry = story.enquiry("needs_information")
    client = client_for("coordinator")
    item = reverse("recovery:enquiry", args=[enquiry.reference])
    take = reverse("recovery:enquiry-take", args=[enquiry.reference])
    assert f'action="{take}"' in client.get(item).content.decode()

    response = client.post(take, {"next": f"{item}#actions"})

    assert response.status_code == 302
    enquiry.refresh_from_db()
    assert enquiry.owner == people["coordinator"]
    assert "is yours now" in client.get(item).content.decode()
    # GET changes nothing; an address elsewhere is not followed; a reviewer may not take an
    # operation (no triage permission): 403 and nothing changed.
    assert client.get(take).status_code == 405
    op = story.operation("unknown")
    assert client.post(
        reverse("recovery:op-take", args=[op.pk]), {"next": "https://evil.example/"}
    )["Location"].startswith("/console/enquiries/")
    refused = client_for("reviewer").post(
        reverse("recovery:op-take", args=[story.operation("failed").pk])
    )
    assert refused.status_code == 403
    assert not Operation.objects.filter(owner=people["reviewer"]).exists()


# --- Groups ---------------------------------------------------------------------------------


def test_what_failed_the_same_way_is_one_line_that_opens_into_its_items(story, client_for):
    same = _failed_the_same_way(story, 5)
    other = _failed_the_same_way(story, 2, status=422, attention="invalid", hours=1)
    story.operation("unknown")  # alone: no line of its own
    client = client_for("coordinator")

    page = client.get(reverse("recovery:queue"))
    html = page.content.decode()
    lines = {g.label: g for g in page.context["failure_groups"]}
    assert set(lines) == {"CRM 503 - retries used up", "CRM 422 - refused as invalid"}
    assert "CRM 503 - retries used up</strong> - 5 items, oldest 4 h" in html
    key = lines["CRM 503 - retries used up"].param
    assert key == "crm~failed~retry_budget_exhausted~transient~503"

    opened = client.get(reverse("recovery:queue"), {"group": key})
    assert {r.key for r in opened.context["page"].rows} == {str(op.pk) for op in same}
    assert opened.context["page"].count == 5
    body = opened.content.decode()
    assert "The whole group: all 5 items" in body and f'value="{key}"' in body
    assert str(other[0].pk) not in body
    # A group the address garbles is said, not silently "everything".
    garbled = client.get(reverse("recovery:queue"), {"group": "crm~failed~<b>"})
    assert any("group" in note for note in garbled.context["notes"])
    assert garbled.context["page"].count == 8


# --- Bulk actions ---------------------------------------------------------------------------


def test_bulk_reconcile_one_reason_each_item_checked_and_a_summary(story, client_for, people):
    unknown = [story.operation("unknown", attention="lookup_failed") for _ in range(3)]
    failed = story.operation("failed")  # reconcile is not possible for a failed write
    reason = "CRM search was down 09:00-09:40; asking again"
    client = client_for("coordinator")
    items = [f"operation:{op.pk}" for op in [*unknown, failed]]

    response = client.post(
        reverse("recovery:bulk"),
        {"action": "reconcile", "reason": reason, "item": items, "next": "/console/"},
    )

    assert response.status_code == 302
    summary = client.get(response["Location"])
    assert summary.status_code == 200
    html = summary.content.decode()
    assert "Reconcile now: 3 done, 1 refused" in html
    assert (
        html.count("Done</span>") == 3
        and "Reconcile now” is not possible now: this operation is failed" in html
    )
    for op in unknown:
        assert _journal(op, "recovery.operation.reconcile_requested").get().reason == reason
    assert not _journal(failed, "recovery.operation.reconcile_requested").exists()
    failed.refresh_from_db()
    assert failed.state == OperationState.FAILED


def test_bulk_retry_is_refused_item_by_item_without_the_permission(story, client_for):
    """A retry after refused credentials is an admin's (docs/runbooks/README.md): each item is
    refused, in words that name who may."""
    ops = _failed_the_same_way(story, 3, attention="auth")
    Operation.objects.filter(pk__in=[o.pk for o in ops]).update(last_error_class="auth")
    client = client_for("coordinator")  # no ledger.recover_operation

    response = client.post(
        reverse("recovery:bulk"),
        {"action": "retry", "reason": "CRM is back", "item": [f"operation:{o.pk}" for o in ops]},
    )

    html = client.get(response["Location"]).content.decode()
    assert "Retry: 0 done, 3 refused" in html
    assert "You may not retry: only an admin or a holder of the recovery permission may" in html
    assert set(
        Operation.objects.filter(pk__in=[o.pk for o in ops]).values_list("state", flat=True)
    ) == {OperationState.FAILED}
    assert not JournalEntry.objects.filter(action__contains="retry", reason="CRM is back").exists()


def test_bulk_cancel_a_whole_group_and_reassign_a_selection(story, client_for, people):
    ops = _failed_the_same_way(story, 4, status=422, attention="invalid")
    key = "crm~failed~invalid~invalid~422"
    enquiry = story.enquiry("needs_information")
    admin = client_for("admin")

    done = admin.post(
        reverse("recovery:bulk"),
        {"action": "cancel", "reason": "duplicates of ENQ-9, closed by phone", "group": key},
    )
    html = admin.get(done["Location"]).content.decode()
    assert "Cancel safely: 4 done, 0 refused" in html
    assert set(
        Operation.objects.filter(pk__in=[o.pk for o in ops]).values_list("state", flat=True)
    ) == {OperationState.CANCELLED}

    op = story.operation("unknown")
    moved = admin.post(
        reverse("recovery:bulk"),
        {
            "action": "reassign",
            "reason": "Ana covers the CRM today",
            "owner": people["reviewer"].pk,
            "item": [f"operation:{op.pk}", f"enquiry:{enquiry.reference}"],
        },
    )
    assert "2 done, 0 refused" in admin.get(moved["Location"]).content.decode()
    op.refresh_from_db()
    enquiry.refresh_from_db()
    assert op.owner == enquiry.owner == people["reviewer"]


def test_bulk_refuses_what_it_cannot_read_and_names_the_field(story, client_for):
    client = client_for("coordinator")
    op = story.operation("unknown")
    cases = [
        ({"action": "reconcile", "item": [f"operation:{op.pk}"]}, "Give a reason"),
        ({"action": "delete", "reason": "x", "item": [f"operation:{op.pk}"]}, "Action: "),
        ({"action": "reconcile", "reason": "x"}, "Select at least one item"),
        ({"action": "reconcile", "reason": "x", "item": ["operation:not-a-uuid"]}, "Not a queue"),
        ({"action": "reconcile", "reason": "x", "group": "crm~nope"}, "Group: "),
    ]
    for data, said in cases:
        response = client.post(reverse("recovery:bulk"), data)
        assert response.status_code == 422
        html = response.content.decode()
        assert said in html and "Nothing was done" in html, data
        if data.get("reason"):  # what was typed is kept
            assert f">{data['reason']}</textarea>" in html
    assert not _journal(op, "recovery.operation.reconcile_requested").exists()
    gone = client.get(reverse("recovery:bulk-results", args=["nothing"]))
    assert gone.status_code == 410 and "no longer kept" in gone.content.decode()


# --- Sorts and quick views -------------------------------------------------------------------


def test_sort_by_age_due_and_last_attempt(story, client_for):
    now = timezone.now()
    old = story.operation("unknown")
    new = story.operation("failed")
    Operation.objects.filter(pk=old.pk).update(
        state_changed_at=now - timedelta(days=3), last_attempted_at=now - timedelta(days=2)
    )
    Operation.objects.filter(pk=new.pk).update(
        state_changed_at=now - timedelta(hours=1), last_attempted_at=now - timedelta(minutes=5)
    )
    client = client_for("coordinator")

    def order(sort):
        rows = client.get(reverse("recovery:queue"), {"sort": sort}).context["page"].rows
        return [r.key for r in rows if r.kind == "operation"]

    assert order("age") == [str(old.pk), str(new.pk)]
    assert order("attempt") == [str(new.pk), str(old.pk)]
    page = client.get(reverse("recovery:queue"), {"sort": "attempt"}).content.decode()
    assert 'aria-sort="descending"><a href="?sort=attempt">Last attempt' in page
    noted = client.get(reverse("recovery:queue"), {"sort": "newest"}).context["notes"]
    assert noted == ["sort “newest” not understood; showing the most urgent first."]


def test_quick_views_are_links_with_query_strings(story, client_for, people):
    ResponsePolicy.objects.create(queue="", response_period=timedelta(hours=2))
    mine = story.operation("unknown")
    Operation.objects.filter(pk=mine.pk).update(
        owner=people["coordinator"], state_changed_at=timezone.now() - timedelta(days=30)
    )
    story.operation("unknown")  # nobody's
    client = client_for("coordinator")
    html = client.get(reverse("recovery:queue")).content.decode()
    assert 'href="?mine=1&amp;overdue=1">My overdue</a>' in html
    assert 'href="?state=unknown&amp;integration=crm">CRM unknown</a>' in html
    rows = client.get("/console/?mine=1&overdue=1").context["page"].rows
    assert [r.key for r in rows] == [str(mine.pk)]
    crm_unknown = client.get("/console/?state=unknown&integration=crm").context["page"].rows
    assert len(crm_unknown) == 2


# --- Review like a pull request ----------------------------------------------------------------


def test_review_shows_revision_n_against_n_minus_1_and_the_next_opens(story, client_for, people):
    from intake import services as intake_services

    first = story.enquiry("ready_for_review", reference="ENQ-R1")
    second = story.enquiry("ready_for_review", reference="ENQ-R2")
    Enquiry = type(first)
    Enquiry.objects.filter(pk=second.pk).update(state_changed_at=timezone.now())
    intake_services.revise_enquiry(
        first.pk,
        actor=people["admin"],
        reason="customer phoned with a number <b>call after 5</b>",
        fields={"phone": "+44 7700 900123", "email": "new@example.org"},
    )
    client = client_for("reviewer")

    page = client.get(reverse("recovery:review-item", args=["ENQ-R1"]))
    html = page.content.decode()
    assert "Revision 2 against revision 1" in html
    assert "Edited by <strong>the-admin</strong>" in html
    assert "customer phoned with a number &lt;b&gt;call after 5&lt;/b&gt;" in html
    rows = {r["field"]: r for r in page.context["diff"]["rows"]}
    assert rows["email"] == {
        "field": "email",
        "before": "resident@example.org",
        "after": "new@example.org",
        "changed": True,
    }
    assert rows["phone"]["changed"] and rows["phone"]["before"] == ""
    assert not rows["message"]["changed"] and not rows["category"]["changed"]
    assert "<del>resident@example.org</del>" in html and "<ins>new@example.org</ins>" in html

    approved = client.post(
        reverse("recovery:enquiry-approve", args=["ENQ-R1"]),
        {"reason": "number checked", "next": "/console/review/ENQ-R1/"},
    )
    assert approved.status_code == 302
    assert approved["Location"] == reverse("recovery:review-item", args=["ENQ-R2"]) + "#content"
    first.refresh_from_db()
    assert first.state == "approved"
    following = client.get(approved["Location"]).content.decode()
    assert "ENQ-R1: Approved: delivery to the CRM is queued. Next waiting: ENQ-R2." in following
    assert "Revision 1, as received" in following

    rejected = client.post(
        reverse("recovery:enquiry-reject", args=["ENQ-R2"]),
        {"reason": "spam", "resident_message": "Sorry.", "next": "/console/review/ENQ-R2/"},
    )
    assert rejected["Location"] == reverse("recovery:review") + "#content"
    # From the item page a decision stays on that page.
    third = story.enquiry("ready_for_review")
    from_item = client.post(
        reverse("recovery:enquiry-reject", args=[third.reference]),
        {"reason": "spam", "resident_message": "Sorry."},
    )
    assert from_item["Location"].startswith(reverse("recovery:enquiry", args=[third.reference]))


def test_no_assign_to_me_on_what_is_mine_through_its_queue(story, client_for, people):
    ResponsePolicy.objects.create(
        queue="unknown", owner=people["coordinator"], response_period=timedelta(hours=2)
    )
    op = story.operation("unknown")
    client = client_for("coordinator")
    take = reverse("recovery:op-take", args=[op.pk])
    assert f'action="{take}"' not in client.get(reverse("recovery:queue")).content.decode()
    item = reverse("recovery:enquiry", args=[op.enquiry.reference])
    assert f'action="{take}"' not in client.get(item).content.decode()
    # Someone else in the same role still sees it: the queue's owner is not them.
    other = client_for("admin")
    assert f'action="{take}"' in other.get(reverse("recovery:queue")).content.decode()
    assert f'action="{take}"' in other.get(item).content.decode()


def _rows_since(pk):
    """The journal rows after ``pk``, without what differs by request (its id and time)."""
    fields = ("subject_type", "subject_id", "action", "from_state", "to_state", "actor")
    rows = JournalEntry.objects.filter(pk__gt=pk).order_by("pk")
    return list(rows.values_list(*fields, "actor_user", "kept_reason", "evidence"))


def _last_pk():
    return JournalEntry.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


@pytest.mark.parametrize(
    "action,state,extra",
    [("reconcile", "unknown", {}), ("cancel", "failed", {}), ("reassign", "unknown", {"owner": 1})],
)
def test_a_bulk_action_and_the_single_action_journal_the_same_rows(
    story, client_for, people, action, state, extra
):
    """The same item, acted on from its page and then (the first undone) in bulk: the same
    journal rows, as the same person with the same reason (recovery.views.actions.act)."""
    op = story.operation(state, attention="lookup_failed" if state == "unknown" else "")
    client = client_for("admin")
    data = {"reason": "the same reason"}
    if "owner" in extra:
        data["owner"] = people["reviewer"].pk
    segment = OPERATION_ACTIONS[action].segment

    point = transaction.savepoint()
    before = _last_pk()
    assert client.post(reverse(f"recovery:op-{segment}", args=[op.pk]), data).status_code == 302
    single = _rows_since(before)
    transaction.savepoint_rollback(point)

    before = _last_pk()
    response = client.post(
        reverse("recovery:bulk"), {"action": action, "item": f"operation:{op.pk}", **data}
    )
    assert "1 done, 0 refused" in client.get(response["Location"]).content.decode()
    assert single and _rows_since(before) == single


@pytest.mark.parametrize(
    "action,state,role",
    [
        ("retry", "failed", "coordinator"),
        ("reconcile", "failed", "coordinator"),
        ("reassign", "unknown", "reviewer"),
    ],
)
def test_a_bulk_action_refuses_in_the_single_actions_words(story, client_for, action, state, role):
    """A person who may not (or an item whose state does not allow it): the bulk summary says
    what the item's page says, and nothing is journalled either way."""
    op = story.operation(state, attention="lookup_failed" if state == "unknown" else "")
    client = client_for(role)
    before = _last_pk()
    segment = OPERATION_ACTIONS[action].segment
    page = client.post(reverse(f"recovery:op-{segment}", args=[op.pk]), {"reason": "why not"})
    assert page.status_code in (403, 409)
    said = unescape(page.content.decode())
    response = client.post(
        reverse("recovery:bulk"),
        {"action": action, "reason": "why not", "item": f"operation:{op.pk}"},
    )
    summary = unescape(client.get(response["Location"]).content.decode())
    assert "0 done, 1 refused" in summary
    outcome = re.search(r'Refused</span>: <span class="reason">(.*?)</span>', summary, re.S)
    refusal = outcome.group(1) if outcome else ""
    assert refusal and refusal in said
    assert _last_pk() == before
