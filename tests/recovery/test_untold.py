"""Who could not be told (recovery.untold): a person whose latest message was not sent is named
on the dashboard until a later one is; so is a person with something to tell and no address."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.models import Operation, OperationState
from ledger.services import reassign_operation
from recovery import notices, setup
from recovery.untold import untold

pytestmark = pytest.mark.django_db


@pytest.fixture
def boss(make_user):
    return make_user("admin", username="boss", email="boss@example.org")


@pytest.fixture
def casey(make_user, integrations_rows):
    return make_user("coordinator", username="casey", email="casey@example.org")


def _told_about_an_item(story, boss, casey, now):
    op = story.operation("failed")
    reassign_operation(op.pk, actor=boss, reason="yours", owner=casey)
    notices.collect(now)
    [digest] = [d for d in notices.send(now) if d.payload["person"] == "casey"]
    return digest


def _relay_answered(digest, *, kind, status, message):
    """The digest tried once and refused, as the engine leaves it (its columns, its state)."""
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=digest.pk)
        op.submit(actor="system:tests", reason="claimed")
        op.attempt_count = op.budget_used = 1
        op.last_error_class, op.last_error_status = kind, status
        op.last_error_message = message
        op.last_attempted_at = timezone.now()
        op.attention = "invalid" if kind == "invalid" else "retry_budget_exhausted"
        op.fail(actor="system:tests", reason=message)
        op.save()
    return op


def _confirm(digest):
    with transaction.atomic():
        op = Operation.objects.select_for_update().get(pk=digest.pk)
        op.submit(actor="system:tests", reason="claimed")
        op.confirm(actor="system:tests", reason="250 queued")
        op.save()


def test_a_person_whose_latest_message_failed_is_named_until_a_later_one_is_sent(
    story, boss, casey
):
    now = timezone.now()
    first = _told_about_an_item(story, boss, casey, now)
    assert untold() == []  # not tried yet: nothing to say
    _relay_answered(first, kind="transient", status=421, message="MAIL FROM: 421 4.3.2 busy")

    [row] = untold()
    assert row.person == casey and row.again
    assert row.why == "the relay refused the message for now (421)"

    later = now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES, seconds=1)
    [second] = notices.send(later)
    [row] = untold()  # made to carry it, not sent yet: still not told
    assert row.operation == second and "refused the message for now" in row.why
    _confirm(second)
    assert untold() == []


def test_a_refused_address_goes_again_only_once_the_address_is_changed(story, boss, casey):
    now = timezone.now()
    first = _told_about_an_item(story, boss, casey, now)
    _relay_answered(
        first, kind="invalid", status=550, message="recipient casey@example.org refused: 550"
    )
    [row] = untold()
    assert row.why == "the relay refused the address (550)" and not row.again

    later = now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES, seconds=1)
    assert notices.send(later) == []  # the same address would be refused again
    setup.set_email(casey, actor=boss, reason="typo fixed", email="casey.j@example.org")
    [second] = notices.send(later)

    first.refresh_from_db()
    assert first.state == OperationState.CANCELLED
    assert second.payload["to"] == "casey.j@example.org"
    assert second.payload["count"] == 1
    assert second.payload["earlier"]["why"] == "the relay refused the address (550)"


def test_a_person_with_something_to_tell_and_no_address_is_named(story, boss, make_user):
    robin = make_user("coordinator", username="robin")
    op = story.operation("failed")
    reassign_operation(op.pk, actor=boss, reason="yours", owner=robin)
    notices.run()
    [row] = untold()
    assert row.person == robin and row.why == "no e-mail address" and row.operation is None


def test_the_dashboard_names_who_could_not_be_told(story, boss, casey, client_for):
    now = timezone.now()
    first = _told_about_an_item(story, boss, casey, now)
    _relay_answered(first, kind="transient", status=None, message="not connected: refused")
    page = client_for("admin").get("/console/dashboard/").content.decode()
    assert (
        "Not told: <strong" in page
        and ">casey</strong> — the relay could not be reached at" in page
    )
    assert f"/console/operations/{first.pk}/" in page
