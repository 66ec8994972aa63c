"""A new event's enquiry and first revision are written out (config.roundtrip) and sent in one
round trip with the event's other writes: the rows must be the ones the ORM's own saves write."""

import uuid

import pytest
from django.db import connection, transaction
from django.utils import timezone

from config import roundtrip
from intake.models import Enquiry, Revision
from tests import wire

pytestmark = pytest.mark.django_db

# Columns that differ between two rows by construction: their keys, the save and transition times.
# Each row's own values: its identity and its random resident_secret (intake.residentlink).
OWN = {"id", "reference", "enquiry_id", "updated_at", "state_changed_at", "resident_secret"}


def _pair(now):
    enquiry = Enquiry(
        source="website",
        workflow_version="v1",
        name="Zoë Müller",
        email="zoe@example.org",
        phone="+44 20 7946 0000",
        subject="Missed collection",
        message="My bin was not emptied this week.",
        service_hint="waste",
        consent=True,
        documents=[{"id": "doc-1", "version": 2}],
        created_at=now,
        state_changed_at=now,
        receipt_pending=True,
    )
    enquiry.validate(actor="system:intake", reason="signed event accepted", evidence={})
    revision = Revision(
        enquiry=enquiry,
        number=1,
        fields={"name": "Zoë Müller", "category": None, "nested": {"a": [1, "ü"]}},
        origin="intake",
        created_at=now,
    )
    return enquiry, revision


def _insert_new(enquiry, revision):
    with transaction.atomic(), roundtrip.together():
        roundtrip.insert([enquiry])
        roundtrip.insert([revision])


def _row(model, pk):
    return {k: v for k, v in model.objects.filter(pk=pk).values().get().items() if k not in OWN}


def test_the_rows_equal_what_the_orm_writes_in_one_round_trip():
    now = timezone.now()
    by_orm, by_orm_revision = _pair(now)
    by_orm.save(force_insert=True)
    by_orm_revision.save()
    fast, fast_revision = _pair(now)

    with wire.sent(connection) as sent:
        _insert_new(fast, fast_revision)

    writes = [ex for ex in sent.without() if ex[0].startswith("INSERT")]
    assert len(writes) == 1 and len(writes[0]) == 2, sent.exchanges
    assert _row(Enquiry, fast.pk) == _row(Enquiry, by_orm.pk)
    assert _row(Revision, fast_revision.pk) == _row(Revision, by_orm_revision.pk)
    assert Revision.objects.get(pk=fast_revision.pk).enquiry_id == fast.pk
    # The instances are left as a save leaves them: stored, and the enquiry's message guarded.
    assert not fast._state.adding and not fast_revision._state.adding
    assert fast._state.db == fast_revision._state.db == "default"
    fast.message = "changed"
    with pytest.raises(ValueError, match="never overwritten"):
        fast.save()


def test_the_enquiry_saves_later_as_one_the_orm_inserted():
    """django-fsm's concurrency check compares the state it last saw: after _insert_new an
    update of the same enquiry goes through, as after an ORM insert."""
    fast, fast_revision = _pair(timezone.now())
    _insert_new(fast, fast_revision)

    fast.mark_ready_for_review(actor="system:intake", reason="test", evidence={})
    with transaction.atomic():
        fast.save()

    assert Enquiry.objects.get(pk=fast.pk).state == "ready_for_review"
    assert uuid.UUID(str(fast.pk))


def test_a_new_event_is_two_round_trips_of_writes(post_event):
    """The event's INSERT (its answer says whether anything is new), then one message with the
    enquiry, its revision, its documents, the transition's journal row and the receipt's task;
    each row as the ORM would have written it is checked above and by the intake suite."""
    from django_q.models import OrmQ

    from intake.models import Document
    from ledger.models import JournalEntry

    body = (
        b'{"email": "ada@example.org", "message": "My bin was not emptied.", "consent": true, '
        b'"documents": [{"id": "doc-1", "version": "3"}]}'
    )
    with wire.sent(connection) as sent:
        response = post_event(body)
    assert response.status_code == 202, response.content
    writes = [ex for ex in sent.without() if ex[0].startswith(("INSERT", "UPDATE"))]
    assert len(writes) == 2, sent.exchanges
    assert writes[0] == [writes[0][0]] and writes[0][0].startswith("INSERT INTO intake_intakeevent")
    batch = " ".join(writes[1])
    for table in (
        "intake_enquiry",
        "intake_revision",
        "intake_document",
        "ledger_journalentry",
        "django_q_ormq",
    ):
        assert f'INSERT INTO "{table}"' in batch, table
    enquiry = Enquiry.objects.get(reference=response.json()["reference"])
    assert enquiry.state == "validated"
    assert Revision.objects.filter(enquiry=enquiry, number=1).count() == 1
    assert Document.objects.filter(enquiry=enquiry).count() == 1
    assert (
        JournalEntry.objects.filter(enquiry=enquiry, action="intake.enquiry.validate").count() == 1
    )
    assert OrmQ.objects.filter(payload__isnull=False).count() == 1
