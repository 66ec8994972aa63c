"""Operator actions: each refuses a GET, a wrong role, an empty reason and a state that does
not allow it (nothing changes: state, journal, queued tasks); and each does its work when
allowed, through the services, with the reason in the journal.

A refused form comes back as the page (422 for a bad field, 409 for a state that does not allow
it), the refusal written in the card acted on."""

import re
from html import unescape

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django_q.models import OrmQ

from intake.models import Enquiry, EnquiryState, Revision
from ledger.models import Integration, JournalEntry, Operation, OperationState
from tests.recovery.pages import card, item_url, text


def snapshot():
    return (
        JournalEntry.objects.count(),
        list(Operation.objects.order_by("pk").values_list("pk", "state", "owner_id", "held")),
        list(Enquiry.objects.order_by("pk").values_list("pk", "state", "current_revision")),
        list(Integration.objects.order_by("pk").values_list("paused", "awaiting_backlog_review")),
        OrmQ.objects.count(),
    )


def messages_of(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def page_text(response):
    from html import unescape

    return unescape(response.content.decode())


# (url name, role that may act, how to make an item where it is allowed, one where it is not,
#  extra POST fields)
OP_CASES = [
    ("op-reconcile", "coordinator", "unknown", "confirmed", {}),
    ("op-retry", "admin", "failed", "confirmed", {}),
    ("op-complete", "coordinator", "unknown", "confirmed", {"external_id": "CRM-1"}),
    # A coordinator cancels what does not end an enquiry (the acknowledgement, here); cancelling
    # an approved enquiry's CRM write is a reviewer's decision (see the cancel tests below).
    ("op-cancel", "coordinator", "failed", "confirmed", {}),
    ("op-compensate", "admin", "confirmed", "unknown", {}),
    # A compensation is approved on its own; a revision's CRM write only with the revision.
    ("op-approve", "admin", "proposed", "confirmed", {}),
    ("op-reassign", "coordinator", "unknown", "confirmed", {}),
]
WRONG_ROLE = {
    "op-reconcile": "reviewer",
    "op-retry": "coordinator",
    "op-complete": "reviewer",
    "op-cancel": "reviewer",
    "op-compensate": "coordinator",
    "op-approve": "reviewer",
    "op-reassign": "reviewer",
}
ACTION_OF = {
    "op-cancel": ("notify.send", "notify"),
    "op-approve": ("crm.close_enquiry", "crm"),
}


def make_op(story, state, name=""):
    attention = "lookup_failed" if state == "unknown" else ""
    action, integration = ACTION_OF.get(name, ("crm.create_enquiry", "crm"))
    return story.operation(state, attention=attention, action=action, integration=integration)


@pytest.mark.parametrize("name,role,ok_state,bad_state,extra", OP_CASES)
def test_operation_action_refusals(story, client_for, name, role, ok_state, bad_state, extra):
    op = make_op(story, ok_state, name)
    url = reverse(f"recovery:{name}", args=[op.pk])
    before = snapshot()

    assert client_for(role).get(url).status_code == 405
    assert client_for(WRONG_ROLE[name]).post(url, {"reason": "because", **extra}).status_code == 403
    response = client_for(role).post(url, {"reason": "   ", **extra})
    assert response.status_code == 422
    assert "Give a reason" in page_text(response)
    assert snapshot() == before

    other = make_op(story, bad_state, name)
    before = snapshot()
    response = client_for(role).post(
        reverse(f"recovery:{name}", args=[other.pk]), {"reason": "because", **extra}
    )
    assert response.status_code == 409
    assert "is not possible now" in page_text(response)
    assert snapshot() == before


def test_unknown_operation_is_404(client_for):
    url = reverse("recovery:op-reconcile", args=["6b1f7a52-52a5-4d4c-9d0a-3f3c1f0f0f0f"])
    before = snapshot()
    assert client_for("admin").post(url, {"reason": "x"}).status_code == 404
    assert snapshot() == before


def test_reconcile_now_journals_the_reason_and_queues_a_lookup(story, client_for, people):
    op = make_op(story, "unknown")
    url = reverse("recovery:op-reconcile", args=[op.pk])
    response = client_for("coordinator").post(url, {"reason": "customer rang"})
    assert response.status_code == 302
    assert response["Location"].endswith(f"#op-{op.pk}")  # the card, where its message is
    row = JournalEntry.objects.get(action="recovery.operation.reconcile_requested")
    assert (row.reason, row.actor_user) == ("customer rang", people["coordinator"])
    assert OrmQ.objects.count() == 1


def test_retry_needs_the_recovery_permission_until_an_admin_grants_it(story, client_for, people):
    from django.contrib.auth.models import Permission

    op = make_op(story, "failed")
    url = reverse("recovery:op-retry", args=[op.pk])
    assert client_for("coordinator").post(url, {"reason": "CRM is back"}).status_code == 403
    people["coordinator"].user_permissions.add(Permission.objects.get(codename="recover_operation"))
    assert client_for("coordinator").post(url, {"reason": "CRM is back"}).status_code == 302
    op.refresh_from_db()
    assert op.state == OperationState.APPROVED
    assert JournalEntry.objects.filter(action="ledger.operation.retry", reason="CRM is back")


def test_complete_by_hand_needs_the_external_reference(story, client_for):
    op = make_op(story, "unknown")
    url = reverse("recovery:op-complete", args=[op.pk])
    before = snapshot()
    response = client_for("coordinator").post(url, {"reason": "found it"})
    assert response.status_code == 422
    assert "Give the record&#x27;s reference at the destination." in response.content.decode()
    assert snapshot() == before
    client_for("coordinator").post(url, {"reason": "found it", "external_id": "CRM-77"})
    op.refresh_from_db()
    op.enquiry.refresh_from_db()
    assert (op.state, op.external_id) == (OperationState.CONFIRMED, "CRM-77")
    assert op.enquiry.state == EnquiryState.CONFIRMED


def test_cancel_and_reassign(story, client_for, people):
    op = make_op(story, "failed")
    client_for("coordinator").post(
        reverse("recovery:op-reassign", args=[op.pk]),
        {"reason": "Sam knows this CRM", "owner": people["admin"].pk},
    )
    op.refresh_from_db()
    assert op.owner == people["admin"]
    # Cancelling it closes the approved enquiry: a reviewer's decision, not the coordinator's.
    cancel = reverse("recovery:op-cancel", args=[op.pk])
    assert client_for("coordinator").post(cancel, {"reason": "withdrew"}).status_code == 403
    client_for("reviewer").post(cancel, {"reason": "customer withdrew"})
    op.refresh_from_db()
    assert op.state == OperationState.CANCELLED
    assert Enquiry.objects.get(pk=op.enquiry_id).state == EnquiryState.REJECTED


def test_compensate_then_approve_the_compensation(story, client_for):
    op = make_op(story, "confirmed")
    client_for("admin").post(
        reverse("recovery:op-compensate", args=[op.pk]), {"reason": "sent by mistake"}
    )
    compensation = Operation.objects.get(compensates=op)
    assert (compensation.action, compensation.state) == (
        "crm.close_enquiry",
        OperationState.PROPOSED,
    )
    url = reverse("recovery:op-approve", args=[compensation.pk])
    # Approving a compensation changes the CRM: the recovery permission, not a reviewer's.
    assert client_for("reviewer").post(url, {"reason": "ok"}).status_code == 403
    client_for("admin").post(url, {"reason": "checked with the CRM team"})
    compensation.refresh_from_db()
    assert compensation.state == OperationState.APPROVED


# --- enquiry actions -----------------------------------------------------------------------------

ENQUIRY_CASES = [
    # name, role, allowed state, refused state, wrong role
    ("enquiry-approve", "reviewer", "ready_for_review", "needs_information", "coordinator"),
    ("enquiry-edit", "reviewer", "ready_for_review", "confirmed", "coordinator"),
    ("enquiry-request-information", "reviewer", "ready_for_review", "confirmed", "coordinator"),
    (
        "enquiry-information-received",
        "reviewer",
        "needs_information",
        "ready_for_review",
        "coordinator",
    ),
    ("enquiry-reject", "reviewer", "ready_for_review", "confirmed", "coordinator"),
    ("enquiry-assign", "coordinator", "ready_for_review", "confirmed", None),
]


@pytest.mark.parametrize("name,role,ok_state,bad_state,wrong", ENQUIRY_CASES)
def test_enquiry_action_refusals(story, client_for, people, name, role, ok_state, bad_state, wrong):
    from django.contrib.auth import get_user_model

    extra = {"subject": "Changed"} if name == "enquiry-edit" else {}
    if name in ("enquiry-request-information", "enquiry-reject"):
        extra = {"resident_message": "Words for the resident."}
    enquiry = story.enquiry(ok_state)
    url = reverse(f"recovery:{name}", args=[enquiry.reference])
    before = snapshot()
    assert client_for(role).get(url).status_code == 405
    if wrong:
        assert client_for(wrong).post(url, {"reason": "x", **extra}).status_code == 403
    else:  # no role holds neither permission; a user with no role at all is refused
        nobody = get_user_model().objects.create_user("no-role")
        client = client_for(None)
        client.force_login(nobody)
        assert client.post(url, {"reason": "x", **extra}).status_code == 403
    response = client_for(role).post(url, {"reason": "", **extra})
    assert response.status_code == 422
    assert "Give a reason" in page_text(response)
    assert snapshot() == before

    other = story.enquiry(bad_state)
    before = snapshot()
    response = client_for(role).post(
        reverse(f"recovery:{name}", args=[other.reference]), {"reason": "x", **extra}
    )
    assert response.status_code == 409
    assert "is not possible now" in page_text(response)
    assert snapshot() == before


def test_reviewer_approves_and_the_crm_write_is_queued(story, client_for, people):
    enquiry = story.enquiry("ready_for_review")
    response = client_for("reviewer").post(
        reverse("recovery:enquiry-approve", args=[enquiry.reference]), {"reason": "checked"}
    )
    assert response.status_code == 302
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.APPROVED
    op = Operation.objects.get(enquiry=enquiry, action="crm.create_enquiry")
    assert op.state == OperationState.APPROVED
    assert OrmQ.objects.count() == 1


def test_a_reviewer_cannot_approve_a_revision_they_edited(story, client_for, people, make_user):
    enquiry = story.enquiry("ready_for_review")
    edit = reverse("recovery:enquiry-edit", args=[enquiry.reference])
    client_for("reviewer").post(edit, {"reason": "clearer subject", "subject": "No heating"})
    enquiry.refresh_from_db()
    assert enquiry.current_revision == 2
    assert Revision.objects.get(enquiry=enquiry, number=2).created_by == people["reviewer"]

    page = client_for("reviewer").get(reverse("recovery:review-item", args=[enquiry.reference]))
    assert b"another reviewer must approve it" in page.content
    approve = reverse("recovery:enquiry-approve", args=[enquiry.reference])
    before = snapshot()
    response = client_for("reviewer").post(approve, {"reason": "looks right"})
    assert response.status_code == 403
    assert b"edited themselves" in response.content
    assert snapshot() == before

    response = client_for("admin").post(approve, {"reason": "second pair of eyes"})
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.APPROVED
    assert enquiry.approved_revision == 2


def test_edit_with_nothing_changed_makes_no_revision(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    before = snapshot()
    response = client_for("reviewer").post(
        reverse("recovery:enquiry-edit", args=[enquiry.reference]), {"reason": "no-op"}
    )
    assert response.status_code == 422
    assert "Nothing changed" in page_text(response)
    assert snapshot() == before


def test_request_information_then_received_then_reject(story, client_for):
    enquiry = story.enquiry("ready_for_review")
    ref = enquiry.reference
    c = client_for("reviewer")
    c.post(
        reverse("recovery:enquiry-request-information", args=[ref]),
        {"reason": "address?", "resident_message": "Your address, please."},
    )
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.NEEDS_INFORMATION
    c.post(reverse("recovery:enquiry-information-received", args=[ref]), {"reason": "phoned"})
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.READY_FOR_REVIEW
    c.post(
        reverse("recovery:enquiry-reject", args=[ref]),
        {"reason": "duplicate by phone", "resident_message": "We have it by phone."},
    )
    enquiry.refresh_from_db()
    assert enquiry.state == EnquiryState.REJECTED
    reasons = list(JournalEntry.objects.filter(enquiry=enquiry).values_list("reason", flat=True))
    assert {"address?", "phoned", "duplicate by phone"} <= set(reasons)


def test_assign_owner(story, client_for, people):
    enquiry = story.enquiry("needs_information")
    client_for("coordinator").post(
        reverse("recovery:enquiry-assign", args=[enquiry.reference]),
        {"reason": "on shift", "owner": people["coordinator"].pk},
    )
    enquiry.refresh_from_db()
    assert enquiry.owner == people["coordinator"]
    assert JournalEntry.objects.filter(action="intake.enquiry.assigned", reason="on shift")


@pytest.mark.parametrize(
    "back", ["https://evil.example/", "/console//evil.example/", "/console/\\evil.example/"]
)
def test_next_must_stay_in_the_console(story, client_for, back):
    """One guard for every form that comes back (recovery.views.common.safe_next): a
    backslash, which a browser reads as a slash, is refused here as on the bulk forms."""
    enquiry = story.enquiry("ready_for_review")
    url = reverse("recovery:enquiry-reject", args=[enquiry.reference])
    response = client_for("reviewer").post(
        url, {"reason": "x", "resident_message": "Sorry.", "next": back}
    )
    assert response["Location"] == reverse("recovery:enquiry", args=[enquiry.reference]) + (
        "#actions"
    )


# --- integrations: pause, resume via the backlog review, release --------------------------------


def test_held_document_reads_are_called_reads_not_writes(story, client_for, integrations_rows):
    """The documents integration only reads: what a pause holds there is said to be reads, on
    the queue, the integrations page and the backlog; the CRM's stay writes."""
    op = story.operation("approved", action="documents.extract", integration="documents")
    admin = client_for("admin")
    admin.post(reverse("recovery:pause", args=["documents"]), {"reason": "share moved"})
    op.refresh_from_db()
    assert op.held
    queue = text(admin.get(reverse("recovery:queue")))
    assert "1 read held while paused" in queue and "write held" not in queue
    page = text(admin.get(reverse("recovery:integrations")))
    assert "Held reads" in page and "Held writes" in page  # documents; the CRM and the rest
    backlog = text(admin.get(reverse("recovery:backlog", args=["documents"])))
    assert "These reads wait" in backlog and "write" not in backlog


def test_pause_resume_review_release(story, client_for, integrations_rows):
    op = story.operation("approved")
    admin = client_for("admin")
    pause = reverse("recovery:pause", args=["crm"])
    resume = reverse("recovery:resume", args=["crm"])
    release = reverse("recovery:release", args=["crm"])

    before = snapshot()
    assert client_for("coordinator").post(pause, {"reason": "mapping"}).status_code == 403
    assert admin.post(pause, {"reason": ""}).status_code == 302
    assert admin.post(resume, {"reason": "not paused"}).status_code == 302  # refused: not paused
    assert snapshot() == before

    admin.post(pause, {"reason": "CRM field mapping changed"})
    op.refresh_from_db()
    assert op.held
    crm = Integration.objects.get(name="crm")
    assert crm.paused and crm.pause_reason == "CRM field mapping changed"
    queue = admin.get(reverse("recovery:queue")).content.decode()
    assert "1 write held while paused" in queue

    before = snapshot()
    response = admin.post(release, {"reason": "too early", "operations": [str(op.pk)]})
    assert any("is paused; resume it before releasing" in m for m in messages_of(response))
    assert snapshot() == before

    response = admin.post(resume, {"reason": "mapping fixed"})
    assert response["Location"] == reverse("recovery:backlog", args=["crm"])
    crm.refresh_from_db()
    assert not crm.paused and crm.awaiting_backlog_review
    op.refresh_from_db()
    assert op.held  # resuming releases nothing by itself
    page = admin.get(reverse("recovery:backlog", args=["crm"])).content.decode()
    assert op.enquiry.reference in page

    admin.post(
        release,
        {"reason": "checked three records", "operations": [str(op.pk)], "confirmed": "1"},
    )
    op.refresh_from_db()
    crm.refresh_from_db()
    assert not op.held and not crm.awaiting_backlog_review
    assert JournalEntry.objects.filter(
        action="ledger.integration.backlog_released", reason="checked three records"
    )


def test_cancel_that_ends_the_enquiry_is_a_reviewers_decision_and_its_outcome(story, client_for):
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
    assert op.state == OperationState.FAILED

    reviewer = client_for("reviewer")
    before = text(reviewer.get(item_url(op)))
    assert f"closes {op.enquiry.reference} as Rejected" in before
    response = reviewer.post(url, {"reason": "the resident withdrew it by phone"})
    assert response.status_code == 302
    op.refresh_from_db()
    enquiry = Enquiry.objects.get(pk=op.enquiry_id)
    assert op.state == OperationState.CANCELLED
    assert enquiry.state == EnquiryState.REJECTED
    withdraw = JournalEntry.objects.get(action="intake.enquiry.withdraw", enquiry=enquiry)
    assert withdraw.reason == "the resident withdrew it by phone"
    after = text(reviewer.get(item_url(op)))
    assert "Outcome Rejected: the-reviewer cancelled its delivery to the CRM" in after
    assert "“the resident withdrew it by phone”" in after


def test_a_write_cancelled_after_refused_attempts_says_so(story, client_for):
    op = story.operation("failed", attention="invalid", attempts=["invalid"])
    client_for("reviewer").post(
        reverse("recovery:op-cancel", args=[op.pk]), {"reason": "will not be fixed"}
    )
    words = text(client_for("reviewer").get(item_url(op)))
    assert "in the CRM: No. Cancelled after 1 attempt that the CRM did not accept" in words
    assert "Cancelled before anything reached" not in words


def test_a_coordinator_still_cancels_what_does_not_end_an_enquiry(story, client_for):
    op = story.operation("failed", action="notify.send", integration="notify")
    response = client_for("coordinator").post(
        reverse("recovery:op-cancel", args=[op.pk]), {"reason": "address bounced"}
    )
    assert response.status_code == 302
    op.refresh_from_db()
    assert op.state == OperationState.CANCELLED
    assert Enquiry.objects.get(pk=op.enquiry_id).state == EnquiryState.APPROVED


def test_a_refused_form_comes_back_open_with_what_was_typed(story, client_for):
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


def test_edit_errors_name_the_field_and_keep_every_field(story, client_for):
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


def test_every_runbook_an_action_names_exists():
    from django.conf import settings

    from recovery.explain import RUNBOOKS
    from recovery.operator_actions import ACTIONS

    named = {a.runbook for a in ACTIONS.values() if a.runbook}
    assert named  # the registry names some
    for slug in named:
        assert (settings.BASE_DIR / "docs" / "runbooks" / f"{slug}.md").exists(), slug
        assert slug in RUNBOOKS, slug  # so the console serves it, with its title


def test_a_runbook_page_names_the_actions_the_registry_gives_it(client_for):
    """The console's runbook page reads the registry: the actions whose row names it. (The
    item page names one runbook, the situation's: recovery.explain.runbook_for_operation.)"""
    from recovery.operator_actions import ACTIONS

    for slug in {a.runbook for a in ACTIONS.values() if a.runbook}:
        page = unescape(
            client_for("coordinator").get(reverse("recovery:runbook", args=[slug])).content.decode()
        )
        labels = [a.label for a in ACTIONS.values() if a.runbook == slug]
        assert f"The console's actions it covers: {', '.join(labels)}." in page, slug
