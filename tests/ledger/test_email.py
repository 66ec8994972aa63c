"""The smtp kind against a real SMTP relay (harness.mailserver, its own process): each reply
read as what it proves, counted at the relay AND in the ledger."""

from __future__ import annotations

import email
import email.policy

import pytest
from django.db import transaction

from intake.services import request_information
from ledger import notices
from ledger.models import Attempt, Operation, OperationState
from ledger.proposals import acknowledgement_payload
from ledger.services import LEDGER, propose, retry_operation
from recovery.ownership import item_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def acknowledge(enquiry):
    with transaction.atomic():
        op, _ = propose(
            enquiry,
            "notify.send",
            acknowledgement_payload(enquiry),
            revision=1,
            detail=notices.ACKNOWLEDGEMENT,
            actor=LEDGER,
            approve=True,
        )
    return op


def settled(op_id, *states):
    def check():
        op = Operation.objects.get(pk=op_id)
        return op if op.state in states else None

    return check


def parsed(mail, record):
    return email.message_from_bytes(mail.read(record), policy=email.policy.default)


def test_accepted_message_is_confirmed_with_the_relays_queue_id(
    email_integration, mail, make_enquiry, run_queue
):
    enquiry = make_enquiry(email="resident@example.org")
    op = acknowledge(enquiry)
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    message_id = notices.message_id(op.idempotency_key)
    assert op.state == OperationState.CONFIRMED
    assert mail.stats()["received"] == 1
    assert mail.count(message_id) == 1
    [record] = mail.messages()
    assert op.result["message_id"] == message_id
    assert op.result["relay_queue_id"] and op.external_id == op.result["relay_queue_id"]
    assert record["to"] == ["resident@example.org"]
    message = parsed(mail, record)
    assert message["Message-ID"] == message_id
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    assert enquiry.reference in text and enquiry.reference in html
    # Receipt is not review: it never says someone has looked at it.
    assert "Nobody has read it yet" in text
    assert "reviewed" not in text.lower()
    [attempt] = Attempt.objects.filter(operation=op)
    assert attempt.outcome == "success" and attempt.response_status == 250
    assert attempt.request_summary["message_id"] == message_id


def test_421_is_transient_and_the_retry_sends_one_message(
    email_integration, mail, make_enquiry, run_queue
):
    mail.fault("421")
    op = acknowledge(make_enquiry())
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    outcomes = list(Attempt.objects.filter(operation=op).values_list("outcome", flat=True))
    assert outcomes == ["transient", "success"]
    assert Attempt.objects.get(operation=op, number=1).response_status == 421
    assert mail.stats()["received"] == 1
    assert mail.count(notices.message_id(op.idempotency_key)) == 1


def test_550_for_the_recipient_is_invalid_with_the_relays_words(
    email_integration, mail, make_enquiry, run_queue
):
    mail.fault("550", recipient="nobody@example.org")
    op = acknowledge(make_enquiry(email="nobody@example.org"))
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.FAILED
    assert op.attention == "invalid"
    assert op.last_error_status == 550
    assert "User unknown" in op.last_error_message
    assert Attempt.objects.filter(operation=op).count() == 1  # never retried
    assert mail.stats()["received"] == 0


@pytest.mark.parametrize("fault", [{"mode": "drop_after_data"}, {"mode": "late", "delay": 3}])
def test_no_reply_after_the_final_dot_is_unknown_and_waits_for_a_person(
    fault, email_integration, mail, make_enquiry, run_queue
):
    mode = fault.pop("mode")
    mail.fault(mode, **fault)
    op = acknowledge(make_enquiry())
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )
    run_queue()  # whatever else was queued runs: nothing may send it again

    op.refresh_from_db()
    message_id = notices.message_id(op.idempotency_key)
    assert op.state == OperationState.UNKNOWN
    assert op.attention == "smtp_no_reply"
    # A person has it: its queue's owner, or (none set here) the admins, the relay's owner among
    # them; nobody was given it by hand.
    assert op.owner is None
    assert email_integration.owner in item_owner(op).people()
    assert op.next_attempt_at is None
    assert Attempt.objects.filter(operation=op).count() == 1  # no look-up, no resend
    assert mail.stats()["received"] == 1
    assert mail.count(message_id) == 1


def test_a_persons_retry_after_no_reply_sends_the_same_message_id(
    email_integration, mail, make_enquiry, make_user, run_queue
):
    mail.fault("drop_after_data")
    op = acknowledge(make_enquiry())
    run_queue(until=settled(op.pk, OperationState.UNKNOWN))
    admin = make_user("admin")
    retry_operation(op.pk, actor=admin, reason="relay log has no trace of it")
    run_queue(until=settled(op.pk, OperationState.CONFIRMED, OperationState.FAILED))

    op.refresh_from_db()
    message_id = notices.message_id(op.idempotency_key)
    assert op.state == OperationState.CONFIRMED
    # Both copies carry one Message-ID: a reader's mail program can tell the repeat.
    assert mail.stats()["by_message_id"] == {message_id: 2}


def test_a_refused_connection_is_tried_again_until_the_relay_is_back(
    email_integration, mail, make_enquiry, run_queue
):
    mail.fault("refuse")
    op = acknowledge(make_enquiry())
    run_queue(until=lambda: Attempt.objects.filter(operation=op, outcome="transient").count() >= 4)

    op.refresh_from_db()
    assert op.state == OperationState.APPROVED and op.next_attempt_at is not None
    assert op.attention == "" and op.owner is None
    mail.clear_faults()
    run_queue(until=settled(op.pk, OperationState.CONFIRMED, OperationState.FAILED))
    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    assert mail.stats()["received"] == 1
    assert mail.count(notices.message_id(op.idempotency_key)) == 1


def test_needs_information_sends_the_message_to_the_resident_never_the_reason(
    email_integration, mail, make_enquiry, reviewer, run_queue
):
    enquiry = make_enquiry(email="resident@example.org")
    request_information(
        enquiry.pk,
        actor=reviewer,
        reason="noise team needs both; ask for their address",
        resident_message="Which street is the bin on, and since when?",
    )
    op = Operation.objects.get(enquiry=enquiry, action="notify.send")
    assert op.payload["template"] == notices.NEEDS_INFORMATION
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    [record] = mail.messages()
    raw = mail.read(record).decode("utf-8", "replace")
    message = parsed(mail, record)
    assert message["Message-ID"] == notices.message_id(op.idempotency_key)
    assert "more information" in message["Subject"]
    text = message.get_body(("plain",)).get_content()
    html = message.get_body(("html",)).get_content()
    assert "Which street is the bin on, and since when?" in text
    assert "Which street is the bin on, and since when?" in html
    assert enquiry.reference in text
    # The journal reason stays inside Handover: not in the text, the HTML or any header.
    for part in (text, html, raw, str(message)):
        assert "noise team" not in part and "ask for their address" not in part
    enquiry.refresh_from_db()
    assert enquiry.state == "needs_information"
    # The journal keeps both, marked which is which.
    from ledger.models import JournalEntry

    entry = JournalEntry.objects.get(
        enquiry_id=enquiry.pk, action="intake.enquiry.request_information"
    )
    assert entry.reason == "noise team needs both; ask for their address"
    assert entry.evidence["resident_message"] == "Which street is the bin on, and since when?"


def test_each_request_for_information_is_its_own_message(
    email_integration, mail, make_enquiry, reviewer, run_queue
):
    from intake.services import information_received

    enquiry = make_enquiry()
    request_information(
        enquiry.pk, actor=reviewer, reason="street", resident_message="The street, please."
    )
    information_received(enquiry.pk, actor=reviewer, reason="phoned in")
    request_information(
        enquiry.pk, actor=reviewer, reason="number", resident_message="And the house number."
    )
    ops = list(Operation.objects.filter(enquiry=enquiry, action="notify.send"))
    assert len(ops) == 2
    run_queue(
        until=lambda: all(
            settled(o.pk, OperationState.CONFIRMED, OperationState.CANCELLED)() for o in ops
        )
    )
    # The first request no longer stands (the enquiry went back to review, then was asked
    # again): it is cancelled as its moment passed; the second is sent, once.
    first, second = sorted(ops, key=lambda o: o.created_at)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == OperationState.CANCELLED
    assert second.state == OperationState.CONFIRMED
    assert mail.stats()["received"] == 1
    assert mail.count(notices.message_id(second.idempotency_key)) == 1


def test_a_failed_message_leaves_the_crm_write_alone(
    email_integration, mail, approved_enquiry, sandbox, run_queue
):
    from tests.ledger.conftest import crm_records

    mail.fault("550")
    enquiry, crm = approved_enquiry()

    def passed_on_failed():
        note = Operation.objects.filter(enquiry=enquiry, payload__template="passed_on").first()
        return note is not None and note.state == OperationState.FAILED

    run_queue(until=lambda: settled(crm.pk, OperationState.CONFIRMED)() and passed_on_failed())
    enquiry.refresh_from_db()
    assert enquiry.state == "confirmed"
    assert crm_records(sandbox, enquiry.reference) == 1
    assert mail.stats()["received"] == 0


def test_check_says_ready_or_what_is_wrong(email_integration, mail, make_user):
    from ledger.services import check_integration

    admin = make_user("admin")
    assert check_integration("notify", actor=admin) == []
    mail.fault("refuse")
    [problem] = check_integration("notify", actor=admin)
    assert "Connection refused" in problem and str(mail.port) in problem


@pytest.mark.parametrize(
    "address, envelope, smtputf8",
    [
        ("josé@example.org", "josé@example.org", True),
        ("用户@例子.广告", "用户@xn--fsqu00a.xn--4rr70v", True),
        ("a@bücher.de", "a@xn--bcher-kva.de", False),
    ],
)
def test_an_international_address_is_acknowledged(
    address, envelope, smtputf8, email_integration, mail, make_enquiry, run_queue
):
    op = acknowledge(make_enquiry(email=address))
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED, op.last_error_message
    [record] = mail.messages()
    assert record["to"] == [envelope]
    # SMTPUTF8 only where an address needs it: an international domain is written in ASCII.
    assert ("SMTPUTF8" in record["mail_options"]) is smtputf8
    assert mail.count(notices.message_id(op.idempotency_key)) == 1
    # The header as RFC 6532 writes it: UTF-8 itself, not an RFC 2047 word inside an address.
    raw = mail.read(record)
    assert f"\nTo: {envelope}\r\n".encode() in raw
    assert b"=?utf-8?" not in raw.split(b"\r\n\r\n")[0].split(b"\nTo:")[1].split(b"\n")[0]


def test_an_international_address_the_relay_cannot_take_is_invalid_in_words(
    email_integration, mail, make_enquiry, run_queue
):
    mail.fault("no_smtputf8")
    op = acknowledge(make_enquiry(email="josé@example.org"))
    idn = acknowledge(make_enquiry(email="a@bücher.de"))
    run_queue(
        until=lambda: all(
            settled(o.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN)()
            for o in (op, idn)
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.FAILED
    assert op.attention == "invalid" and op.last_error_class == "invalid"
    assert (
        "the relay does not accept international addresses (SMTPUTF8); the address "
        "josé@example.org cannot be written" in op.last_error_message
    )
    assert Attempt.objects.filter(operation=op).count() == 1  # not retried
    assert op.owner is None and email_integration.owner in item_owner(op).people()
    # The IDN domain needs no SMTPUTF8: it went.
    idn.refresh_from_db()
    assert idn.state == OperationState.CONFIRMED
    assert mail.stats()["by_message_id"] == {notices.message_id(idn.idempotency_key): 1}


def test_a_garbage_greeting_is_not_sent_and_tried_again(
    email_integration, mail, make_enquiry, run_queue
):
    mail.fault("garbage_greeting")
    op = acknowledge(make_enquiry())
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    first = Attempt.objects.get(operation=op, number=1)
    assert first.outcome == "transient" and first.response_status is None
    assert "not SMTP" in first.error_message
    assert mail.count(notices.message_id(op.idempotency_key)) == 1


def test_the_250_is_recorded_without_waiting_for_the_goodbye(
    email_integration, mail, make_enquiry, run_queue
):
    # The relay answers QUIT within the timeout, but late: waiting for it would hold the 250
    # from being recorded that long (a worker's guard could stop it in between).
    email_integration.timeout_seconds = 10.0
    email_integration.save(update_fields=["timeout_seconds"])
    mail.fault("slow_quit", delay=5)
    op = acknowledge(make_enquiry())
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    # The relay is still holding its answer to QUIT: Handover never waited for it.
    assert mail.stats()["quits_answered"] == 0
    assert mail.count(notices.message_id(op.idempotency_key)) == 1


def test_a_relay_too_slow_before_the_message_is_tried_again_and_sends_it_once(
    email_integration, mail, make_enquiry, run_queue
):
    mail.fault("drip", delay=0.3)  # MAIL's reply takes over 3 s of the 1 s timeout
    op = acknowledge(make_enquiry())
    run_queue(
        until=settled(
            op.pk, OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN
        )
    )

    op.refresh_from_db()
    assert op.state == OperationState.CONFIRMED
    outcomes = list(Attempt.objects.filter(operation=op).values_list("outcome", flat=True))
    assert outcomes == ["transient", "success"]  # a timeout before DATA: never unknown
    assert mail.count(notices.message_id(op.idempotency_key)) == 1
