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
