"""The operators' digest (recovery.notices.send) marks exactly what its message counts: every
pending notice once, none attached to a message already built, none lost when the build fails."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from ledger.models import Operation
from ledger.services import propose_message
from recovery import notices
from recovery.models import OperatorNotice

pytestmark = pytest.mark.django_db


@pytest.fixture
def casey(make_user, integrations_rows):
    return make_user("coordinator", username="casey", email="casey@example.org")


def pending_notices(user, count, now, tag="n"):
    OperatorNotice.objects.bulk_create(
        OperatorNotice(
            user=user,
            kind=OperatorNotice.OVERDUE,
            key=f"test:{tag}:{n}",
            title=f"item {tag}{n:03d}",
            link=f"/console/enquiries/{n}/",
            created_at=now - timedelta(seconds=count - n),
        )
        for n in range(count)
    )


def test_a_digest_counts_and_marks_every_pending_notice_once(casey):
    now = timezone.now()
    pending_notices(casey, 120, now)

    [op] = notices.send(now)

    assert op.payload["count"] == 120
    # The first 50, oldest first, are listed; every one of the 120 is carried by this message.
    assert [i["title"] for i in op.payload["items"]] == [f"item n{n:03d}" for n in range(50)]
    assert OperatorNotice.objects.filter(user=casey, operation=op).count() == 120
    later = now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES + 1)
    assert notices.send(later) == []  # nothing is told twice


def test_notices_are_not_attached_to_a_message_already_built(casey):
    """The window's message exists (built by a concurrent sender, or earlier in the window):
    the notices it does not list wait for the next window instead of being marked as told."""
    now = timezone.now()
    minutes = settings.OPERATOR_NOTICE_MINUTES
    key = notices._key(casey, notices.window_start(now, minutes))
    built, _ = propose_message(
        key,
        {"template": "operator_digest", "to": casey.email, "count": 0, "items": []},
        at=now - timedelta(minutes=minutes + 1),
    )
    pending_notices(casey, 3, now)

    assert notices.send(now) == []
    assert OperatorNotice.objects.filter(user=casey, operation__isnull=True).count() == 3
    assert not OperatorNotice.objects.filter(operation=built).exists()

    [op] = notices.send(now + timedelta(minutes=minutes))
    assert op.pk != built.pk
    assert op.payload["count"] == 3


def test_a_digest_that_fails_while_marking_tells_nothing_and_loses_nothing(casey):
    now = timezone.now()
    pending_notices(casey, 10, now)
    with connection.cursor() as cursor:  # PostgreSQL itself refuses the mark
        cursor.execute(
            "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN RAISE EXCEPTION 'refused'; END$$;"
            " CREATE TRIGGER test_refuse BEFORE UPDATE ON recovery_operatornotice"
            " FOR EACH ROW EXECUTE FUNCTION test_refuse()"
        )

    with pytest.raises(DatabaseError):
        notices.send(now)

    assert not Operation.objects.filter(
        idempotency_key__startswith=f"operator:{casey.pk}:"
    ).exists()
    assert OperatorNotice.objects.filter(user=casey, operation__isnull=True).count() == 10


# --- made from what is true when it is made ----------------------------------------------------


@pytest.fixture
def boss(make_user):
    return make_user("admin", username="boss")


def _assigned(story, boss, person, *, error="retry_budget_exhausted: 503: service_unavailable"):
    """A failed CRM write given to ``person`` by the admin, its destination's error on it."""
    from ledger.services import reassign_operation

    op = story.operation("failed", attention="retry_budget_exhausted")
    Operation.objects.filter(pk=op.pk).update(last_error_message=error)
    reassign_operation(op.pk, actor=boss, reason="yours", owner=person)
    return op


def test_a_message_lists_only_what_is_still_open_and_still_theirs(story, casey, boss, make_user):
    from ledger.services import complete_by_hand, reassign_operation

    dana = make_user("coordinator", username="dana", email="dana@example.org")
    resolved = _assigned(story, boss, casey)
    handed_on = _assigned(story, boss, casey)
    still = _assigned(story, boss, casey)
    now = timezone.now()
    assert notices.collect(now) == 3
    complete_by_hand(resolved.pk, actor=boss, reason="done in the CRM", external_id="CRM-1")
    reassign_operation(handed_on.pk, actor=boss, reason="dana knows it", owner=dana)

    [op] = [o for o in notices.send(now) if o.payload["person"] == "casey"]

    assert op.payload["count"] == 1
    [line] = op.payload["items"]
    assert line["link"] == f"/console/operations/{still.pk}/"
    assert line["title"].startswith(still.enquiry.reference + ": Create the enquiry in the CRM")
    left = dict(
        OperatorNotice.objects.filter(user=casey, left_out__gt="").values_list(
            "subject", "left_out"
        )
    )
    assert left == {
        f"operation:{resolved.pk}": "resolved",
        f"operation:{handed_on.pk}": "someone else's",
    }
    from ledger.models import JournalEntry

    said = JournalEntry.objects.get(subject_id=str(op.pk), action="ledger.operation.proposed")
    assert "2 left out (resolved or given to someone else since)" in said.reason


def test_an_item_named_by_two_notices_is_one_line_with_both_reasons(story, casey, boss):
    from recovery.models import ResponsePolicy

    ResponsePolicy.objects.create(queue="failed", owner=boss, response_period=timedelta(hours=1))
    op = _assigned(story, boss, casey)
    now = timezone.now()
    later = now + timedelta(hours=2)  # overdue by then: its owner (casey) is told so too
    notices.collect(later)
    assert OperatorNotice.objects.filter(user=casey, subject=f"operation:{op.pk}").count() == 2

    [digest] = [o for o in notices.send(later) if o.payload["person"] == "casey"]

    assert digest.payload["count"] == 1
    [line] = digest.payload["items"]
    assert line["why"].startswith("Assigned to you by boss; Overdue since ")
    text = digest.payload["body"]
    assert text.count(op.enquiry.reference) == 1


def test_a_line_names_the_enquiry_and_keeps_the_error_text_to_the_technical_detail(
    story, casey, boss, settings
):
    from ledger import notices as mail

    settings.CONSOLE_URL = "http://127.0.0.1:8101/"
    op = _assigned(story, boss, casey)
    now = timezone.now()
    notices.collect(now)
    [digest] = notices.send(now)

    subject, text, html = mail.render(digest.payload["template"], digest.payload)
    assert str(op.pk) not in digest.payload["items"][0]["title"] and str(op.pk) not in subject
    body, _, detail = text.partition("Technical detail")
    assert op.enquiry.reference in body
    assert f"http://127.0.0.1:8101/console/operations/{op.pk}/" in body
    assert "retry_budget_exhausted" not in body and "503: service_unavailable" not in body
    assert "retry_budget_exhausted: 503: service_unavailable" in detail
    assert "(failed, retries used up)" in body
    assert "http://127.0.0.1:8101/console/operations/" in html


def test_a_message_with_nothing_left_is_not_made_and_the_journal_says_so(story, casey, boss):
    from ledger.models import JournalEntry
    from ledger.services import cancel_operation

    op = _assigned(story, boss, casey)
    now = timezone.now()
    notices.collect(now)
    cancel_operation(op.pk, actor=boss, reason="the resident withdrew it")

    assert notices.send(now) == []

    assert not Operation.objects.filter(
        idempotency_key__startswith=f"operator:{casey.pk}:"
    ).exists()
    [row] = JournalEntry.objects.filter(action="recovery.notice.not_sent")
    assert row.subject_id == str(casey.pk)
    assert row.evidence["left_out"] == {"resolved": 1}
    assert "Nothing left to tell casey" in row.reason
    # Left out for good: the next window does not weigh it again.
    assert notices.send(now + timedelta(hours=1)) == []
    assert JournalEntry.objects.filter(action="recovery.notice.not_sent").count() == 1


def test_the_queue_nobody_opened_is_linked_filtered_to_that_queue(story, casey, client_for):
    from recovery.models import ResponsePolicy

    ResponsePolicy.objects.create(queue="failed", owner=casey, review_cadence=timedelta(hours=1))
    story.operation("failed")
    later = timezone.now() + timedelta(hours=2)
    notices.collect(later)
    [digest] = notices.send(later)

    [line] = [i for i in digest.payload["items"] if "Nobody opened" in i["title"]]
    assert line["link"] == "/console/?state=failed"
    assert line["title"].endswith("(last opened: never); 1 item waits in it")
    page = client_for("admin").get(line["link"]).content.decode()
    assert "not understood" not in page


def test_an_overdue_paused_integration_is_told_as_its_backlog_not_as_refused_credentials(casey):
    from ledger.models import Integration
    from recovery.models import ResponsePolicy

    now = timezone.now()
    ResponsePolicy.objects.create(
        queue="paused_backlog", owner=casey, response_period=timedelta(hours=1)
    )
    Integration.objects.filter(name="crm").update(paused=True, paused_at=now - timedelta(hours=3))
    notices.collect(now)
    [digest] = notices.send(now)

    [line] = digest.payload["items"]
    assert line["title"] == "The CRM integration: paused"
    assert line["link"] == "/console/integrations/crm/backlog/"
    assert line["why"].startswith("Overdue since ")
