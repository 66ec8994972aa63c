"""Operators are told (recovery.notices): what needs a person reaches their inbox at a real SMTP
relay, batched, through the ledger; counted at the relay AND in the database."""

from __future__ import annotations

import email
import email.policy
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from ledger import notices as ledger_notices
from ledger.models import Integration, Operation, OperationState
from ledger.services import reassign_operation
from recovery import notices
from recovery.models import NoticePreference, OperatorNotice

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def digests(user=None):
    ops = Operation.objects.filter(enquiry__isnull=True, action="notify.send")
    if user is not None:
        ops = ops.filter(idempotency_key__startswith=f"operator:{user.pk}:")
    return ops


def settled(op):
    op.refresh_from_db()
    return op.state in (OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN)


@pytest.fixture
def crm_owner(make_user, integrations):
    """The CRM integration's owner (told of refused credentials), who also owns the "Operation
    failed" queue by its response policy (and so has the CRM's failed writes)."""
    from recovery.models import ResponsePolicy

    owner = make_user("coordinator", username="crm-owner", email="crm-owner@example.org")
    Integration.objects.filter(name=Integration.CRM).update(owner=owner)
    ResponsePolicy.objects.create(queue="failed", owner=owner, response_period=timedelta(hours=4))
    return owner


def failed_crm_write(sandbox, approved_enquiry, run_queue):
    sandbox.fault("crm.create", "error_503", count=20)
    _enquiry, op = approved_enquiry()
    run_queue(until=lambda: Operation.objects.get(pk=op.pk).state == OperationState.FAILED)
    return Operation.objects.get(pk=op.pk)


def test_a_failed_crm_write_reaches_its_owners_inbox_within_the_interval(
    email_integration, mail, sandbox, crm_owner, approved_enquiry, run_queue
):
    failed = failed_crm_write(sandbox, approved_enquiry, run_queue)
    assert failed.owner is None  # nobody was given it: the failed queue's owner has it
    now = timezone.now()

    notices.run(now)  # the schedule's next minute
    [digest] = digests(crm_owner)
    run_queue(until=lambda: settled(digest))

    assert digest.state == OperationState.CONFIRMED
    assert digest.enquiry is None
    message_id = ledger_notices.message_id(digest.idempotency_key)
    assert mail.stats()["by_message_id"] == {message_id: 1}
    [record] = mail.messages()
    assert record["to"] == ["crm-owner@example.org"]
    message = email.message_from_bytes(mail.read(record), policy=email.policy.default)
    text = message.get_body(("plain",)).get_content()
    link = f"{settings.CONSOLE_URL.rstrip('/')}/console/operations/{failed.pk}/"
    assert link in text
    assert failed.enquiry.reference in text
    assert digest.created_at - now < timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES)

    # Nothing new: nothing more is sent, however often the schedule runs.
    notices.run(now + timedelta(seconds=60))
    notices.run(now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES + 1))
    assert digests(crm_owner).count() == 1
    assert mail.stats()["received"] == 1


def test_at_most_one_message_per_person_per_interval(
    email_integration, mail, make_user, make_enquiry, integrations, run_queue
):
    from tests.ledger.factories import make_operation

    admin = make_user("admin", username="boss")
    casey = make_user("coordinator", username="casey", email="casey@example.org")
    crm = Integration.objects.get(name=Integration.CRM)
    first = make_operation(make_enquiry(), "failed", integration=crm)
    second = make_operation(make_enquiry(), "failed", integration=crm)
    now = timezone.now()
    reassign_operation(first.pk, actor=admin, reason="yours", owner=casey)
    reassign_operation(second.pk, actor=admin, reason="and this", owner=casey)
    notices.run(now)
    [digest] = digests(casey)
    assert digest.payload["count"] == 2  # both in one message

    third = make_operation(make_enquiry(), "unknown", integration=crm)
    reassign_operation(third.pk, actor=admin, reason="one more", owner=casey)
    notices.run(now + timedelta(minutes=1))
    assert digests(casey).count() == 1  # waits for the next interval
    notices.run(now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES, seconds=1))
    assert digests(casey).count() == 2
    run_queue(until=lambda: all(settled(d) for d in digests(casey)))
    assert mail.stats()["received"] == 2
    assert len(mail.stats()["by_message_id"]) == 2


def test_taking_an_item_yourself_is_no_news(
    email_integration, mail, make_user, make_enquiry, integrations
):
    from tests.ledger.factories import make_operation

    casey = make_user("coordinator", username="casey", email="casey@example.org")
    op = make_operation(make_enquiry(), "failed", integration=Integration.objects.get(name="crm"))
    reassign_operation(op.pk, actor=casey, reason="taking it", owner=casey)
    notices.run()
    assert not OperatorNotice.objects.filter(user=casey).exists()
    assert not digests(casey).exists()


def test_a_person_who_turned_messages_off_gets_none(
    email_integration, mail, make_user, make_enquiry, integrations, run_queue
):
    from tests.ledger.factories import make_operation

    admin = make_user("admin", username="boss")
    casey = make_user("coordinator", username="casey", email="casey@example.org")
    NoticePreference.objects.create(user=casey, enabled=False)
    op = make_operation(make_enquiry(), "failed", integration=Integration.objects.get(name="crm"))
    reassign_operation(op.pk, actor=admin, reason="yours", owner=casey)
    notices.run()
    assert OperatorNotice.objects.filter(user=casey).count() == 1  # recorded, shown on /me/
    assert not digests(casey).exists()
    assert mail.stats()["received"] == 0


def test_a_message_to_an_operator_that_fails_is_in_the_queue(
    email_integration, mail, make_user, make_enquiry, integrations, run_queue, client
):
    from recovery.queue import all_rows
    from tests.ledger.factories import make_operation

    admin = make_user("admin", username="boss")
    casey = make_user("coordinator", username="casey", email="casey@example.org")
    op = make_operation(make_enquiry(), "failed", integration=Integration.objects.get(name="crm"))
    reassign_operation(op.pk, actor=admin, reason="yours", owner=casey)
    mail.fault("550", recipient="casey@example.org", count=5)
    notices.run()
    [digest] = digests(casey)
    run_queue(until=lambda: settled(digest))
    assert digest.state == OperationState.FAILED and digest.attention == "invalid"
    assert mail.stats()["received"] == 0
    rows = [r for r in all_rows() if str(r["q_key"]) == str(digest.pk)]
    assert [r["q_queue"] for r in rows] == ["failed"]
    client.force_login(admin)
    page = client.get(f"/console/operations/{digest.pk}/")
    assert page.status_code == 200
    assert "User unknown" in page.content.decode()
    assert client.get("/console/").status_code == 200  # the queue shows it without an enquiry
    # A failed message to an operator is not itself news to e-mail about (no loop).
    notices.run(timezone.now() + timedelta(hours=1))
    assert digests(casey).count() == 1


def test_credentials_refused_tells_the_integrations_owner(
    email_integration, mail, sandbox, crm_owner, approved_enquiry, run_queue
):
    sandbox.fault("crm.create", "error_401", count=5)
    _enquiry, op = approved_enquiry()
    run_queue(until=lambda: Operation.objects.get(pk=op.pk).state == OperationState.FAILED)
    notices.run()
    kinds = set(OperatorNotice.objects.filter(user=crm_owner).values_list("kind", flat=True))
    assert OperatorNotice.CREDENTIALS in kinds
    [digest] = digests(crm_owner)
    run_queue(until=lambda: settled(digest))
    assert mail.stats()["received"] == 1
    text = mail.read(mail.messages()[0]).decode()
    assert "integration refused Handover's credentials" in text
    assert "You own the integration" in text


def test_a_message_the_relay_refused_goes_again_at_the_next_window_and_arrives_once(
    email_integration, mail, make_user, make_enquiry, integrations, run_queue, client
):
    from recovery.digest import not_sent
    from tests.ledger.factories import make_operation

    admin = make_user("admin", username="boss")
    casey = make_user("coordinator", username="casey", email="casey@example.org")
    item = make_operation(make_enquiry(), "failed", integration=Integration.objects.get(name="crm"))
    reassign_operation(item.pk, actor=admin, reason="yours", owner=casey)
    mail.fault("refuse")  # nothing listens until the faults are cleared
    now = timezone.now()
    notices.run(now)
    [first] = digests(casey)
    run_queue(until=lambda: not_sent(Operation.objects.get(pk=first.pk)))
    assert mail.stats()["received"] == 0
    client.force_login(admin)
    page = client.get("/console/dashboard/").content.decode()
    assert "Not told: <strong" in page and ">casey</strong>" in page
    assert "the relay could not be reached" in page

    mail.clear_faults()
    notices.run(now + timedelta(minutes=1))  # the same window: nothing more yet
    assert digests(casey).count() == 1
    notices.run(now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES, seconds=1))
    second = digests(casey).exclude(pk=first.pk).get()
    run_queue(until=lambda: settled(second))
    run_queue()  # whatever else is due: the first must not go too

    first.refresh_from_db()
    assert first.state == OperationState.CANCELLED
    assert second.state == OperationState.CONFIRMED
    assert second.payload["count"] == 1
    stats = mail.stats()
    assert stats["by_message_id"] == {ledger_notices.message_id(second.idempotency_key): 1}
    assert stats["received"] == 1
    text = mail.read(mail.messages()[0]).decode()
    assert item.enquiry.reference in text
    assert "could not be sent (the relay could not be reached)" in text
    assert "Not told:" not in client.get("/console/dashboard/").content.decode()


def test_a_message_waiting_on_a_long_back_off_is_replaced_at_the_next_window_never_sent_twice(
    email_integration, mail, make_user, make_enquiry, integrations, run_queue
):
    """E-mail's back-off may hold a refused message for an hour; the person's next window
    carries what it listed and cancels it, so the relay gets one message, not two."""
    from ledger.tasks import execute_operation
    from tests.ledger.factories import make_operation

    Integration.objects.filter(pk=email_integration.pk).update(
        retry_budget=10, backoff_seconds=3600
    )
    admin = make_user("admin", username="boss")
    casey = make_user("coordinator", username="casey", email="casey@example.org")
    item = make_operation(make_enquiry(), "failed", integration=Integration.objects.get(name="crm"))
    reassign_operation(item.pk, actor=admin, reason="yours", owner=casey)
    mail.fault("421", count=1)
    now = timezone.now()
    notices.run(now)
    [first] = digests(casey)
    run_queue(until=lambda: Operation.objects.get(pk=first.pk).attempt_count == 1)
    first.refresh_from_db()
    assert first.state == OperationState.APPROVED and first.next_attempt_at > timezone.now()

    notices.run(now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES, seconds=1))
    second = digests(casey).exclude(pk=first.pk).get()
    run_queue(until=lambda: settled(second))
    execute_operation(str(first.pk))  # its back-off's turn comes: nothing to send

    first.refresh_from_db()
    assert first.state == OperationState.CANCELLED and first.attempt_count == 1
    assert mail.stats()["by_message_id"] == {ledger_notices.message_id(second.idempotency_key): 1}


def test_a_message_refused_for_its_address_goes_again_once_the_address_is_changed(
    email_integration, mail, make_user, make_enquiry, integrations, run_queue
):
    from recovery import setup
    from tests.ledger.factories import make_operation

    admin = make_user("admin", username="boss")
    casey = make_user("coordinator", username="casey", email="casey@example.org")
    item = make_operation(make_enquiry(), "failed", integration=Integration.objects.get(name="crm"))
    reassign_operation(item.pk, actor=admin, reason="yours", owner=casey)
    mail.fault("550", recipient="casey@example.org", count=50)
    now = timezone.now()
    notices.run(now)
    [first] = digests(casey)
    run_queue(until=lambda: settled(first))
    later = now + timedelta(minutes=settings.OPERATOR_NOTICE_MINUTES, seconds=1)
    notices.run(later)
    assert digests(casey).count() == 1  # the same address would be refused again

    setup.set_email(casey, actor=admin, reason="the old one bounced", email="cj@example.org")
    notices.run(later + timedelta(seconds=1))
    second = digests(casey).exclude(pk=first.pk).get()
    run_queue(until=lambda: settled(second))

    assert second.state == OperationState.CONFIRMED
    [record] = mail.messages()
    assert record["to"] == ["cj@example.org"]
    assert mail.stats()["received"] == 1
    assert item.enquiry.reference in mail.read(record).decode()
