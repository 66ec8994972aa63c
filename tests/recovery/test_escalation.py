"""Overdue items go to the backup owner, once per stay in a state, with a journal row."""

import re
from datetime import timedelta
from importlib import import_module

from django.apps import apps as django_apps
from django.utils import timezone
from django_q.models import Schedule

from ledger.models import JournalEntry, Operation
from recovery.models import Escalation, Queue, ResponsePolicy
from recovery.tasks import escalate_overdue


def test_overdue_items_go_to_the_backup_owner_once(story, people):
    ResponsePolicy.objects.create(
        queue=Queue.UNKNOWN,
        owner=people["coordinator"],
        backup_owner=people["admin"],
        response_period=timedelta(hours=2),
    )
    ResponsePolicy.objects.create(
        queue=Queue.NEEDS_INFORMATION,
        backup_owner=people["reviewer"],
        response_period=timedelta(days=2),
    )
    overdue = story.operation("unknown")
    Operation.objects.filter(pk=overdue.pk).update(
        state_changed_at=timezone.now() - timedelta(hours=3), owner=people["coordinator"]
    )
    fresh = story.operation("unknown")
    waiting = story.enquiry("needs_information")  # within its two days

    assert escalate_overdue() == 1
    overdue.refresh_from_db()
    fresh.refresh_from_db()
    assert overdue.owner == people["admin"]
    assert fresh.owner is None
    row = JournalEntry.objects.get(action="recovery.escalated")
    assert row.subject_id == str(overdue.pk)
    assert row.actor == "system:escalation"
    assert row.evidence["from"] == "the-coordinator" and row.evidence["to"] == "the-admin"
    assert JournalEntry.objects.filter(action="recovery.operation.reassigned").count() == 1

    assert escalate_overdue() == 0  # a second run (or a concurrent one) does nothing
    assert Escalation.objects.count() == 1
    assert not JournalEntry.objects.filter(subject_id=str(waiting.pk), action="recovery.escalated")


def test_overdue_enquiry_without_a_backup_is_journalled_not_reassigned(story, people):
    ResponsePolicy.objects.create(queue="", response_period=timedelta(minutes=1))
    enquiry = story.enquiry("needs_information")
    type(enquiry).objects.filter(pk=enquiry.pk).update(
        state_changed_at=timezone.now() - timedelta(hours=1)
    )
    assert escalate_overdue() == 1
    enquiry.refresh_from_db()
    assert enquiry.owner is None
    row = JournalEntry.objects.get(action="recovery.escalated")
    assert "no backup owner" in row.reason


def test_the_schedule_exists(db):
    # The schedule is the data migration's row (get_or_create), which a transactional test's
    # flush on this process may have emptied: the migration's own function makes it again.
    import_module("recovery.migrations.0003_escalation_schedule").create_schedule(django_apps, None)
    schedule = Schedule.objects.get(name="recovery.escalate_overdue")
    assert schedule.func == "recovery.tasks.escalate_overdue"
    assert schedule.schedule_type == Schedule.MINUTES


def test_an_escalation_run_has_its_own_request_id_in_the_journal(story):
    ResponsePolicy.objects.create(queue="", response_period=timedelta(minutes=1))
    first = story.enquiry("needs_information")
    story.enquiry("needs_information")
    type(first).objects.update(state_changed_at=timezone.now() - timedelta(hours=1))

    assert escalate_overdue() == 2

    ids = set(
        JournalEntry.objects.filter(action="recovery.escalated").values_list(
            "request_id", flat=True
        )
    )
    assert len(ids) == 1 and ids.pop().startswith("escalate-")
    assert escalate_overdue() == 0


def test_escalation_reason_in_local_time(story, people, settings):
    ResponsePolicy.objects.create(
        queue=Queue.UNKNOWN, backup_owner=people["admin"], response_period=timedelta(hours=1)
    )
    op = story.operation("unknown")
    Operation.objects.filter(pk=op.pk).update(state_changed_at=timezone.now() - timedelta(hours=2))
    escalate_overdue()
    reason = JournalEntry.objects.get(action="recovery.escalated").reason
    assert "UTC" not in reason and re.search(r"\d{1,2}:\d\d (GMT|BST)", reason), reason
