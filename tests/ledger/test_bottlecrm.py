"""The BottleCRM kind against a real BottleCRM (the ``bottlecrm`` fixture: gunicorn on loopback,
its own database), the engine run in this process. Every test counts cases AT BottleCRM.

Faults BottleCRM cannot be told to make (a dropped answer, a late request, a worker killed
after the write) run through the fault proxy, elsewhere."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from intake.models import EnquiryState
from ledger import execution
from ledger.connectors.bottlecrm import case_name
from ledger.execution import Lookup
from ledger.models import Integration, JournalEntry, OperationState

pytestmark = [pytest.mark.slow, pytest.mark.bottlecrm]


@pytest.fixture
def crm_owner(make_user):
    return make_user("admin", username="crm-owner")


def point_crm_at(crm, *, owner, token=None):
    from ledger.integrations import ensure_integrations

    ensure_integrations()
    Integration.objects.filter(name="crm").update(
        kind="bottlecrm",
        base_url=crm.url,
        token=token or crm.token,
        timeout_seconds=5.0,
        retry_budget=3,
        backoff_seconds=0.05,
        supports_lookup=True,
        supports_idempotency_key=True,
        settle_delay_seconds=0.0,
        owner=owner,
        paused=False,
    )
    return Integration.objects.get(name="crm")


@pytest.fixture
def crm_row(db, bottlecrm, crm_owner):
    return point_crm_at(bottlecrm, owner=crm_owner)


@pytest.fixture
def approved(make_enquiry, reviewer):
    from ledger.services import approve_revision

    def make(**fields):
        enquiry = make_enquiry(**fields)
        op = approve_revision(enquiry.pk, actor=reviewer, reason="checked")
        enquiry.refresh_from_db()
        return enquiry, op

    return make


def refreshed(*objects):
    for obj in objects:
        obj.refresh_from_db()
    return objects


def check(name="crm"):
    out = io.StringIO()
    try:
        call_command("check_integration", name, stdout=out)
    except SystemExit as exit_:
        return exit_.code, out.getvalue()
    return 0, out.getvalue()


def test_the_configured_bottlecrm_passes_its_check(crm_row):
    code, out = check()
    assert code == 0, out
    assert "BottleCRM at http://127.0.0.1:" in out


def test_an_approved_enquiry_becomes_exactly_one_case_confirmed_with_its_id(
    crm_row, bottlecrm, approved
):
    enquiry, op = approved(message="The streetlight on Mill Lane is out")
    ref = enquiry.reference

    assert execution.execute(op.pk) == "confirmed"

    enquiry, op = refreshed(enquiry, op)
    assert (op.state, enquiry.state) == (OperationState.CONFIRMED, EnquiryState.CONFIRMED)
    (case,) = bottlecrm.cases(ref)
    assert op.external_id == str(case["id"])
    stored = bottlecrm.get_case(op.external_id)
    assert stored["name"].startswith(ref) and len(stored["name"]) <= 64
    assert stored["status"] == "New"
    assert stored["custom_fields"]["external_ref"] == ref
    assert "Mill Lane" in stored["description"]
    assert "resident@example.org" in stored["description"]
    assert op.attempts.get().request_summary["idempotency_key_sent"] is False


def test_a_long_subject_is_cut_to_a_name_bottlecrm_accepts(crm_row, bottlecrm, approved):
    # 64 characters as BottleCRM counts them: accents and an emoji are one character each.
    enquiry, op = approved(message="Überfüllte Mülltonnen in der Straße 🗑️ " * 12)

    assert execution.execute(op.pk) == "confirmed"

    op.refresh_from_db()
    name = bottlecrm.get_case(op.external_id)["name"]
    assert len(name) <= 64 and name.endswith("…")
    assert name.startswith(f"{enquiry.reference} Überfüllte")
    assert bottlecrm.case_count(enquiry.reference) == 1


def test_a_bad_token_fails_as_auth_the_owner_is_told_and_nothing_is_retried(
    db, bottlecrm, crm_owner, approved
):
    point_crm_at(bottlecrm, owner=crm_owner, token="bcrm_pat_not-a-real-token")
    enquiry, op = approved()

    assert execution.execute(op.pk) == "failed (auth)"

    enquiry, op = refreshed(enquiry, op)
    # The queue's owner by the response policy owns it; the integration's owner is told.
    assert (op.state, op.attention, op.owner) == (OperationState.FAILED, "auth", None)
    assert op.last_error_message.startswith("403: ")
    assert "True" not in op.last_error_message
    assert op.next_attempt_at is None and op.attempts.count() == 1
    told = JournalEntry.objects.get(action="ledger.integration.credentials_refused")
    assert told.evidence["owner"] == "crm-owner"
    assert bottlecrm.case_count(enquiry.reference) == 0
    code, out = check()
    assert code == 1 and "refused Handover's credentials" in out


def test_bottlecrm_refusing_a_field_fails_with_its_own_words_on_the_item_page(
    crm_row, bottlecrm, approved, client, crm_owner
):
    # An admin at the council made a case field required that Handover does not fill.
    status, field = bottlecrm.api(
        "POST",
        "/api/custom-fields/",
        {
            "target_model": "Case",
            "key": "ward",
            "label": "Ward",
            "field_type": "text",
            "is_required": True,
        },
    )
    assert status in (200, 201), field
    try:
        enquiry, op = approved()
        assert execution.execute(op.pk) == "failed (invalid)"
        code, out = check()
    finally:
        bottlecrm.api("DELETE", f"/api/custom-fields/{field['id']}/")

    enquiry, op = refreshed(enquiry, op)
    assert (op.state, op.attention) == (OperationState.FAILED, "invalid")
    assert "custom_fields.ward: is required" in op.last_error_message
    assert "True" not in op.last_error_message
    assert op.attempts.count() == 1  # refused as it is: never repeated
    assert bottlecrm.case_count(enquiry.reference) == 0
    client.force_login(crm_owner)
    page = client.get(reverse("recovery:operation", args=[op.pk]), follow=True).content.decode()
    assert "custom_fields.ward: is required" in page
    assert code == 1 and "requires the case field 'ward'" in out


def test_a_create_whose_case_already_exists_is_uncertain_then_reconciled_to_that_one_case(
    crm_row, bottlecrm, approved
):
    enquiry, op = approved()
    ref = enquiry.reference
    # An earlier attempt's case, whose answer Handover never saw: same reference, same name.
    earlier = bottlecrm.create_case(case_name(ref, op.payload["fields"]), reference=ref)
    before = bottlecrm.count_all_cases()

    assert execution.execute(op.pk) == "unknown"

    enquiry, op = refreshed(enquiry, op)
    assert (op.state, op.last_error_class) == (OperationState.UNKNOWN, "uncertain")
    assert "already exists" in op.last_error_message
    assert enquiry.state == EnquiryState.SUBMISSION_UNKNOWN

    assert execution.reconcile(op.pk) is Lookup.CONFIRMED

    enquiry, op = refreshed(enquiry, op)
    assert (op.state, op.external_id) == (OperationState.CONFIRMED, str(earlier["id"]))
    assert enquiry.state == EnquiryState.CONFIRMED
    assert bottlecrm.case_count(ref) == 1
    assert bottlecrm.count_all_cases() == before


def test_compensation_closes_the_case(crm_row, bottlecrm, approved, crm_owner):
    from ledger.policies import connector_for
    from ledger.services import approve_operation, compensate

    enquiry, op = approved()
    execution.execute(op.pk)
    op.refresh_from_db()
    compensation = compensate(op.pk, actor=crm_owner, reason="sent to the wrong service")
    approve_operation(compensation.pk, actor=crm_owner, reason="agreed")

    assert execution.execute(compensation.pk) == "confirmed"

    assert bottlecrm.get_case(op.external_id)["status"] == "Closed"
    assert bottlecrm.case_count(enquiry.reference) == 1  # closed, never deleted
    compensation.refresh_from_db()
    # "Is the case already closed?", the check an uncertain close is settled by.
    found = connector_for(compensation).lookup(compensation)
    assert found.external_ids == [op.external_id]


# --- a BottleCRM where nobody defined the custom field ------------------------------------------


def test_without_the_custom_field_the_check_says_so_and_a_create_is_not_confirmed(
    db, bottlecrm_without_custom_field, crm_owner, approved
):
    crm = bottlecrm_without_custom_field
    point_crm_at(crm, owner=crm_owner)

    code, out = check()
    assert code == 1
    assert "The custom field 'external_ref' is not defined for cases" in out

    before = crm.count_all_cases()
    enquiry, op = approved()
    execution.execute(op.pk)

    enquiry, op = refreshed(enquiry, op)
    assert (
        op.state == OperationState.UNKNOWN
    )  # BottleCRM said 200, but nothing proves it is this enquiry's
    assert op.attention == "reference_not_stored"
    made = op.result["unconfirmed_external_id"]
    assert crm.get_case(made) is not None  # the case the person is pointed at exists
    assert crm.count_all_cases() == before + 1
    assert op.next_attempt_at is None
    assert enquiry.state == EnquiryState.SUBMISSION_UNKNOWN
