"""The BottleCRM harness: a real BottleCRM, reached with the run's token, and the facts about it
that Handover's BottleCRM kind relies on (docs/sandbox.md, shared destinations facts)."""

import sys

import pytest

from harness.bottlecrm import CUSTOM_FIELD_KEY, PrerequisiteMissing, find_python
from tests.conftest import bottlecrm_unavailable


def test_a_case_created_with_the_token_is_found_by_its_reference(bottlecrm, bottlecrm_reference):
    ref = bottlecrm_reference
    assert bottlecrm.case_count(ref) == 0

    made = bottlecrm.create_case(f"{ref} harness check", reference=ref, description="hello")

    assert made["error"] is False
    assert made["cases_obj"]["custom_fields"][CUSTOM_FIELD_KEY] == ref
    assert bottlecrm.case_count(ref) == 1
    assert [case["id"] for case in bottlecrm.cases(ref)] == [made["id"]]
    assert bottlecrm.get_case(made["id"])["name"] == f"{ref} harness check"
    # Exact match: a reference that is a prefix of this one finds nothing.
    assert bottlecrm.case_count(ref[:-1]) == 0
    assert bottlecrm.count_all_cases() >= 1


def test_a_closed_case_is_still_found_and_an_unknown_id_is_none(bottlecrm, bottlecrm_reference):
    ref = bottlecrm_reference
    made = bottlecrm.create_case(f"{ref} to close", reference=ref)

    status, _ = bottlecrm.api("PATCH", f"/api/cases/{made['id']}/", {"status": "Closed"})

    assert status == 200
    assert bottlecrm.get_case(made["id"])["status"] == "Closed"
    assert bottlecrm.case_count(ref) == 1
    assert bottlecrm.get_case("00000000-0000-4000-8000-000000000000") is None


def test_a_bad_token_gets_403_and_creates_nothing(bottlecrm, bottlecrm_reference):
    ref = bottlecrm_reference
    before = bottlecrm.count_all_cases()

    listed, _ = bottlecrm.api("GET", "/api/cases/", token="bcrm_pat_not-a-token")
    created, body = bottlecrm.api(
        "POST", "/api/cases/", {"name": f"{ref} refused"}, token="bcrm_pat_not-a-token"
    )

    assert (listed, created) == (403, 403)
    assert "detail" in body
    assert bottlecrm.count_all_cases() == before
    assert bottlecrm.case_count(ref) == 0


def test_without_the_custom_field_bottlecrm_drops_the_reference(
    bottlecrm_without_custom_field, bottlecrm_reference
):
    # The fact Handover's kind must guard: the create still answers 200, without the reference.
    crm, ref = bottlecrm_without_custom_field, bottlecrm_reference
    before = crm.count_all_cases()

    made = crm.create_case(f"{ref} no field", reference=ref)

    assert made["error"] is False
    assert CUSTOM_FIELD_KEY not in (made["cases_obj"].get("custom_fields") or {})
    assert crm.count_all_cases() == before + 1
    assert crm.case_count(ref) == 0


@pytest.mark.slow  # asks a Python for its version
def test_a_python_that_is_not_3_12_is_named_as_the_missing_prerequisite(monkeypatch):
    if sys.version_info[:2] == (3, 12):
        pytest.skip("this test needs the suite to run on another Python than 3.12")
    monkeypatch.setenv("BOTTLECRM_PYTHON", sys.executable)

    with pytest.raises(PrerequisiteMissing) as missing:
        find_python()

    assert missing.value.step == "find Python 3.12"
    assert "needs Python 3.12" in str(missing.value)


def test_a_missing_prerequisite_fails_under_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    under_ci = _outcome_of(bottlecrm_unavailable, "no Python")
    monkeypatch.delenv("CI")
    elsewhere = _outcome_of(bottlecrm_unavailable, "no Python")

    assert isinstance(under_ci, pytest.fail.Exception)
    assert "required when CI is set. no Python" in str(under_ci)
    assert isinstance(elsewhere, pytest.skip.Exception)
    assert "no BottleCRM: no Python" in str(elsewhere)


def _outcome_of(function, *args):
    # Caught here, so that a skip where a failure was due fails this test instead of skipping it.
    try:
        function(*args)
    except (pytest.fail.Exception, pytest.skip.Exception) as outcome:
        return outcome
    return None
