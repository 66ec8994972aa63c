"""The BottleCRM kind's connectors through the real engine, with BottleCRM's answers scripted at
``ledger.http.send``: what is sent, and how each answer is classified. The same behaviour
against a real BottleCRM: tests/ledger/test_bottlecrm.py."""

from __future__ import annotations

import pytest

from intake.models import EnquiryState
from ledger import execution, http
from ledger.connectors.base import ConnectorError, ErrorKind
from ledger.connectors.bottlecrm import NAME_MAX, ZWJ, _continues, case_name
from ledger.execution import Lookup
from ledger.models import JournalEntry, Operation, OperationState
from ledger.policies import allowed_actions
from tests.ledger.bottlecrm_fake import ScriptedDestination, case, created, listed

BASE = "http://bottlecrm.test"
TOKEN = "bcrm_pat_unit"


@pytest.fixture
def destination(monkeypatch):
    scripted = ScriptedDestination()
    monkeypatch.setattr(http, "send", scripted.send)
    return scripted


@pytest.fixture
def crm_owner(make_user):
    return make_user("admin", username="crm-owner")


@pytest.fixture
def bottlecrm_rows(db, crm_owner):
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration

    rows = ensure_integrations()
    Integration.objects.filter(name="crm").update(
        kind="bottlecrm",
        base_url=BASE,
        token=TOKEN,
        timeout_seconds=1.0,
        retry_budget=3,
        backoff_seconds=0.05,
        supports_lookup=True,
        supports_idempotency_key=True,  # narrowed away by the kind
        settle_delay_seconds=0.0,
        owner=crm_owner,
        paused=False,
    )
    rows["crm"].refresh_from_db()
    return rows


@pytest.fixture
def approved(make_enquiry, reviewer, bottlecrm_rows):
    from ledger.services import approve_revision

    def make(**fields):
        enquiry = make_enquiry(**fields)
        op = approve_revision(enquiry.pk, actor=reviewer, reason="checked")
        enquiry.refresh_from_db()
        return enquiry, op

    return make


def refreshed(enquiry, op):
    enquiry.refresh_from_db()
    op.refresh_from_db()
    return enquiry, op


# --- create -------------------------------------------------------------------------------------


def test_an_approved_enquiry_is_posted_as_a_case_carrying_its_reference(approved, destination):
    enquiry, op = approved(message="The bins on Elm Street were not collected")
    ref = enquiry.reference
    destination.then(200, created("c-1", ref))

    assert execution.execute(op.pk) == "confirmed"

    enquiry, op = refreshed(enquiry, op)
    assert (op.state, op.external_id, enquiry.state) == (
        OperationState.CONFIRMED,
        "c-1",
        "confirmed",
    )
    (call,) = destination.calls
    assert (call.method, call.url) == ("POST", f"{BASE}/api/cases/")
    assert call.headers["Authorization"] == f"Bearer {TOKEN}"
    assert "Idempotency-Key" not in call.headers  # BottleCRM ignores keys: none is claimed
    body = call.json_body
    assert body["custom_fields"] == {"external_ref": ref}
    assert body["name"].startswith(ref + " ") and len(body["name"]) <= NAME_MAX
    assert (body["status"], body["priority"], body["case_type"]) == ("New", "Normal", "Question")
    assert "Elm Street" in body["description"]
    assert "resident@example.org" in body["description"]
    assert op.attempts.get().request_summary["idempotency_key_sent"] is False


def test_the_name_is_cut_on_characters_to_64_and_keeps_the_reference():
    name = case_name("ENQ-7Q2X9K", {"subject": "Überweisung für die Müllabfuhr " * 5 + "🗑️"})
    assert len(name) == NAME_MAX
    assert name.startswith("ENQ-7Q2X9K Überweisung")
    assert name.endswith("…")
    assert case_name("ENQ-1", {"message": "  a\n\nshort   one "}) == "ENQ-1 a short one"
    # Never cut inside what people see as one character: an emoji with its selector, a
    # letter with its combining accent, a family joined by ZWJs.
    for tail in ("🗑️", "e\u0301", "👩\u200d👩\u200d👧"):
        for pad in range(NAME_MAX - 6, NAME_MAX + 2):
            subject = "x" * (pad - 6) + tail + " more words"
            name = case_name("ENQ-1", {"subject": subject})
            assert len(name) <= NAME_MAX
            kept = name.removesuffix("…").rstrip()
            rest = f"ENQ-1 {subject}".removeprefix(kept)
            assert rest != f"ENQ-1 {subject}", (pad, name)  # kept is a prefix
            assert not kept.endswith(ZWJ) and not (rest and _continues(rest[0])), (pad, name)


def test_a_200_that_does_not_echo_the_reference_waits_for_a_person_with_the_case_id(
    approved, destination
):
    enquiry, op = approved()
    answer = created("c-lost", enquiry.reference)
    answer["cases_obj"]["custom_fields"] = {}  # what BottleCRM does with an undefined field
    destination.then(200, answer)

    execution.execute(op.pk)

    enquiry, op = refreshed(enquiry, op)
    assert (
        op.state == OperationState.UNKNOWN
    )  # not confirmed: nothing proves this case is the enquiry's
    assert op.attention == "reference_not_stored"
    assert op.result["unconfirmed_external_id"] == "c-lost"
    assert "c-lost" in op.last_error_message and "external_ref" in op.last_error_message
    assert enquiry.state == EnquiryState.SUBMISSION_UNKNOWN
    assert op.next_attempt_at is None  # no look-up scheduled: it could never find the case
    assert "retry" not in allowed_actions(op, op.integration.owner)  # a retry makes a second
    assert op.owner is None  # the response policy of its queue decides (recovery.ownership)
    assert len(destination.posts()) == 1
    from recovery.explain import external_change, safe_now

    assert "made c-lost, but without Handover's reference" in external_change(op)
    assert safe_now(op).startswith("Open c-lost in ")


def test_name_already_exists_is_uncertain_and_reconciles_to_the_existing_case(
    approved, destination
):
    enquiry, op = approved()
    ref = enquiry.reference
    destination.then(
        400, {"error": True, "errors": {"name": ["Case already exists with this name"]}}
    )

    assert execution.execute(op.pk) == "unknown"

    enquiry, op = refreshed(enquiry, op)
    assert op.state == OperationState.UNKNOWN and op.last_error_class == "uncertain"
    assert "name: Case already exists with this name" in op.last_error_message
    assert enquiry.state == EnquiryState.SUBMISSION_UNKNOWN

    destination.then(200, listed(case("c-first", ref)))
    assert execution.reconcile(op.pk) is Lookup.CONFIRMED

    enquiry, op = refreshed(enquiry, op)
    assert (op.state, op.external_id, enquiry.state) == (
        OperationState.CONFIRMED,
        "c-first",
        "confirmed",
    )
    lookup = destination.calls[-1]
    assert (lookup.method, lookup.url) == ("GET", f"{BASE}/api/cases/")
    assert lookup.params == {
        "cf_external_ref": ref,
        "include_deleted": "true",
        "show_merged": "true",
        "limit": "100",
    }
    assert len(destination.posts()) == 1  # found, so never sent again


def test_a_refusal_says_what_bottlecrm_said_field_by_field(approved, destination):
    enquiry, op = approved()
    destination.then(
        400,
        {"error": True, "errors": {"custom_fields": {"ward": "is required"}, "priority": ["bad"]}},
    )

    execution.execute(op.pk)

    enquiry, op = refreshed(enquiry, op)
    assert (op.state, op.attention) == (OperationState.FAILED, "invalid")
    assert op.last_error_message == "400: custom_fields.ward: is required; priority: bad"
    assert "True" not in op.last_error_message
    assert enquiry.state == "approved"  # delivery failed: back for a person
    assert len(destination.posts()) == 1


def test_403_is_a_credentials_failure_the_owner_is_told_and_nothing_is_retried(
    approved, destination, crm_owner
):
    enquiry, op = approved()
    destination.then(403, {"detail": "Organization context is required. Send a valid token."})

    assert execution.execute(op.pk) == "failed (auth)"

    _enquiry, op = refreshed(enquiry, op)
    # The queue's owner by the response policy owns it; the integration's owner is told.
    assert (op.state, op.attention, op.owner) == (OperationState.FAILED, "auth", None)
    assert "Organization context is required" in op.last_error_message
    told = JournalEntry.objects.get(action="ledger.integration.credentials_refused")
    assert told.evidence["owner"] == "crm-owner"
    assert len(destination.posts()) == 1
    assert Operation.objects.filter(pk=op.pk, next_attempt_at__isnull=False).count() == 0


def test_several_cases_with_the_reference_are_duplicates_for_a_person(approved, destination):
    enquiry, op = approved()
    ref = enquiry.reference
    destination.then(ConnectorError(ErrorKind.UNCERTAIN, "no answer within 1s"))
    execution.execute(op.pk)
    destination.then(200, listed(case("c-1", ref), case("c-2", ref, status="Closed")))

    assert execution.reconcile(op.pk) is Lookup.DUPLICATES

    _enquiry, op = refreshed(enquiry, op)
    assert (op.state, op.attention) == (OperationState.UNKNOWN, "duplicate_records")
    assert op.result["duplicates"] == ["c-1", "c-2"]


def test_a_case_that_only_starts_with_the_reference_is_not_a_match(approved, destination):
    enquiry, op = approved()
    ref = enquiry.reference
    destination.then(ConnectorError(ErrorKind.UNCERTAIN, "no answer within 1s"))
    execution.execute(op.pk)
    destination.then(200, listed(case("c-other", ref + "7")))

    outcome = execution.reconcile(op.pk)

    assert outcome is Lookup.SETTLING  # and believed only after the settle delay
    _enquiry, op = refreshed(enquiry, op)
    assert op.state == OperationState.UNKNOWN
    assert op.next_attempt_at is not None


# --- close (compensation) -----------------------------------------------------------------------


def close_operation(approved, destination, case_id):
    from ledger.services import approve_operation, compensate

    enquiry, op = approved()
    destination.then(200, created(case_id, enquiry.reference))
    execution.execute(op.pk)
    admin = op.integration.owner
    compensation = compensate(op.pk, actor=admin, reason="sent to the wrong team")
    approve_operation(compensation.pk, actor=admin, reason="agreed")
    return compensation


def test_compensation_closes_the_case_with_an_encoded_path(approved, destination):
    compensation = close_operation(approved, destination, "c/../9?x=1")
    destination.then(200, {"error": False, "message": "Case Updated Successfully"})

    assert execution.execute(compensation.pk) == "confirmed"

    call = destination.calls[-1]
    assert (call.method, call.url) == ("PATCH", f"{BASE}/api/cases/c%2F..%2F9%3Fx%3D1/")
    assert call.json_body == {"status": "Closed"}
    compensation.refresh_from_db()
    assert (compensation.state, compensation.external_id) == (
        OperationState.CONFIRMED,
        "c/../9?x=1",
    )


def test_an_uncertain_close_is_settled_by_reading_the_case_status(approved, destination):
    compensation = close_operation(approved, destination, "c-9")
    destination.then(ConnectorError(ErrorKind.UNCERTAIN, "no answer within 1s"))
    execution.execute(compensation.pk)
    destination.then(200, {"cases_obj": {"id": "c-9", "status": "Closed"}})

    assert execution.reconcile(compensation.pk) is Lookup.CONFIRMED

    assert destination.calls[-1].url == f"{BASE}/api/cases/c-9/"
    assert [c.method for c in destination.calls].count("PATCH") == 1


def test_a_dot_dot_case_id_is_never_sent(approved, destination):
    compensation = close_operation(approved, destination, "..")
    calls = len(destination.calls)

    assert execution.execute(compensation.pk) == "failed (invalid)"

    assert len(destination.calls) == calls
    compensation.refresh_from_db()
    assert "cannot be a segment of a URL path" in compensation.last_error_message
