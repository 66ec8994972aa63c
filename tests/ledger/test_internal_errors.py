"""A crash inside Handover's own code is an internal error, never the destination's outcome:
before any request went out nothing was sent (failed, for a person, budget untouched); after
one went out the destination may have acted (unknown, reconciled), and the console says whose
error it was. (ledger.http.send is patched here, the one place unit tests may.)"""

import pytest
from django.urls import reverse

from ledger import http, tasks
from ledger.models import Attempt, OperationState
from recovery import explain
from tests.ledger.conftest import crm_records


def test_a_crash_before_sending_is_internal_and_nothing_is_sent(
    approved_enquiry, sandbox, monkeypatch, make_user, client
):
    def crash(*args, **kwargs):
        raise KeyError("id")

    monkeypatch.setattr(http, "send", crash)
    enquiry, op = approved_enquiry()
    assert tasks.execute_operation(str(op.pk)) == "failed (internal error)"
    op.refresh_from_db()
    assert (op.state, op.attention, op.last_error_class) == (
        OperationState.FAILED,
        "internal_error",
        "internal",
    )
    assert op.budget_used == 0
    assert "error inside Handover before anything was sent" in op.last_error_message
    assert "KeyError" in op.last_error_message
    attempt = Attempt.objects.get(operation=op)
    assert (attempt.outcome, attempt.error_class) == ("internal", "internal")
    assert crm_records(sandbox, enquiry.reference) == 0

    # The console says whose error it was: never "destination unavailable, retry is safe".
    assert explain.runbook_for_operation(op) == "internal-error"
    said = explain.external_change(op) + " " + explain.safe_now(op)
    assert "error inside Handover" in said
    assert "unavailable" not in said and "never accepted" not in said
    client.force_login(make_user("coordinator"))
    page = client.get(reverse("recovery:enquiry", args=[enquiry.reference])).content.decode()
    assert "error inside Handover" in page
    assert "did not accept the request" not in page


def test_a_crash_after_sending_is_uncertain_reconciled_and_still_ours(
    approved_enquiry, sandbox, monkeypatch, run_queue
):
    real_send = http.send

    def crash_after(*args, **kwargs):
        real_send(*args, **kwargs)  # the destination receives it and answers
        raise KeyError("id")

    monkeypatch.setattr(http, "send", crash_after)
    enquiry, op = approved_enquiry()
    assert tasks.execute_operation(str(op.pk)) == "unknown"
    op.refresh_from_db()
    assert (op.state, op.last_error_class) == (OperationState.UNKNOWN, "internal")
    assert "error inside Handover after the request was sent" in op.last_error_message
    assert crm_records(sandbox, enquiry.reference) == 1
    monkeypatch.setattr(http, "send", real_send)
    run_queue(until=lambda: op.__class__.objects.get(pk=op.pk).state == OperationState.CONFIRMED)
    assert crm_records(sandbox, enquiry.reference) == 1  # reconciled, never sent twice


@pytest.mark.parametrize("stored", [1e-300])
def test_an_internal_error_before_sending_is_never_uncertain(approved_enquiry, sandbox, stored):
    # The OverflowError a stored rate of 1e-300 once raised happened before any request: with
    # a setting that still crashes (a negative stored rate, as a raw update can write),
    # nothing is recorded uncertain.
    from ledger.models import Integration

    Integration.objects.filter(name="crm").update(max_requests_per_second=-stored)
    enquiry, op = approved_enquiry()
    outcome = tasks.execute_operation(str(op.pk))
    op.refresh_from_db()
    assert op.state != OperationState.UNKNOWN and op.last_error_class != "uncertain", outcome
    assert crm_records(sandbox, enquiry.reference) in (0, 1)


def test_a_crash_while_reading_an_answer_is_internal_once_never_uncertain(
    make_enquiry, integrations, monkeypatch, sandbox
):
    """A read changes nothing at the destination: a crash of ours after its request went out
    is internal, failed once (not "the destination may have acted", not reconciled, not
    retried), and the read was asked for once."""
    from intake.models import Document
    from ledger.connectors.base import ConnectorError
    from ledger.proposals import propose_extraction

    real_send = http.send
    sent = []

    def crash_after(*args, **kwargs):
        sent.append(args[:2])
        try:
            real_send(*args, **kwargs)
        except ConnectorError:
            pass  # whatever the destination said, the crash is ours
        raise KeyError("content")

    monkeypatch.setattr(http, "send", crash_after)
    enquiry = make_enquiry()
    document = Document.objects.create(enquiry=enquiry, document_id="permit.pdf", version="3")
    op, _ = propose_extraction(enquiry, document, reason="test")
    assert tasks.execute_operation(str(op.pk)) == "failed (internal error)"
    op.refresh_from_db()
    assert (op.state, op.attention, op.last_error_class) == (
        OperationState.FAILED,
        "internal_error",
        "internal",
    )
    assert (
        "error inside Handover while reading what the destination answered" in op.last_error_message
    )
    assert "may have acted" not in op.last_error_message
    assert len(sent) == 1 and op.attempts.count() == 1
    assert tasks.execute_operation(str(op.pk)) == "nothing to claim"  # not retried


def test_a_crash_while_reading_an_answer_is_internal_and_told_once(
    make_enquiry, monkeypatch, db, run_queue
):
    """A read changes nothing at the destination: a failure of Handover's own after its request
    went out (an answer it cannot parse) is internal, failed at once, never "the destination
    may have acted" and retried."""
    from intake.models import Document
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration
    from ledger.proposals import propose_extraction
    from tests.ledger.hostile import HostileServer

    real_send = http.send

    def crash_after(*args, **kwargs):
        real_send(*args, **kwargs)  # the destination receives it and answers
        raise KeyError("DURATION")

    spec = {"headers": {"Content-Type": "application/json"}, "body": {"text": '{"id": "d"}'}}
    with HostileServer(spec) as server:
        ensure_integrations()
        Integration.objects.filter(name="documents").update(
            base_url=server.url, retry_budget=6, backoff_seconds=0.0, paused=False
        )
        monkeypatch.setattr(http, "send", crash_after)
        enquiry = make_enquiry()
        document = Document.objects.create(enquiry=enquiry, document_id="d", version="1")
        op, _ = propose_extraction(enquiry, document, reason="test")
        run_queue()
    op.refresh_from_db()
    assert (op.state, op.attention, op.last_error_class) == (
        OperationState.FAILED,
        "internal_error",
        "internal",
    )
    assert op.last_error_message.startswith("error inside Handover while reading")
    assert "may have acted" not in op.last_error_message
    assert op.attempts.count() == 1 and len(server.requests) == 1
    said = explain.external_change(op)
    assert "answered a read" in said and "before anything was sent" not in said


def test_a_read_proposed_without_its_document_is_internal_in_words_and_asks_nothing(
    make_enquiry, integrations, sandbox
):
    """A document read whose payload does not name the document (as the demo once made one)
    is Handover's own mistake said in words, nothing sent: never a bare KeyError."""
    from ledger.models import Action, Operation, payload_hash

    enquiry = make_enquiry()
    payload = {"reference": enquiry.reference, "revision": 1}
    op = Operation.objects.create(
        enquiry=enquiry,
        action=Action.EXTRACT_DOCUMENT,
        revision=1,
        idempotency_key=f"{enquiry.pk}:{Action.EXTRACT_DOCUMENT}:r1",
        payload=payload,
        payload_hash=payload_hash(payload),
        integration=integrations["documents"],
    )
    op.approve(actor="system:tests", reason="test")
    op.save()
    assert tasks.execute_operation(str(op.pk)) == "failed (internal error)"
    op.refresh_from_db()
    assert (op.state, op.attention, op.last_error_class) == (
        OperationState.FAILED,
        "internal_error",
        "internal",
    )
    assert "proposed without 'document_id' in its payload" in op.last_error_message
    assert "KeyError" not in op.last_error_message
    assert sandbox.stats()["docs"]["total"] == 0
