"""The integrations page's "Check connection": admins only, POST only, journalled, and the
destination's problems said on the page."""

import json

import pytest
from django.contrib.messages import get_messages
from django.test import override_settings
from django.urls import reverse

from ledger import http
from ledger.models import Integration, JournalEntry
from tests.ledger.bottlecrm_fake import ScriptedDestination, listed


@pytest.fixture
def destination(monkeypatch):
    scripted = ScriptedDestination()
    monkeypatch.setattr(http, "send", scripted.send)
    return scripted


@pytest.fixture
def bottlecrm_row(integrations_rows):
    Integration.objects.filter(name="crm").update(
        kind="bottlecrm", base_url="http://bottlecrm.test", token="bcrm_pat_x"
    )


def messages_of(response):
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_an_admin_checks_the_crm_and_reads_what_is_wrong(client_for, bottlecrm_row, destination):
    destination.then(200, listed()).then(200, {"user_obj": {"role": "ADMIN"}})
    destination.then(200, {"definitions": []})
    url = reverse("recovery:check_integration", args=["crm"])

    response = client_for("admin").post(url)

    assert response.status_code == 302
    (said,) = messages_of(response)
    assert said.startswith("CRM: The custom field 'external_ref' is not defined for cases")
    entry = JournalEntry.objects.get(action="ledger.integration.checked")
    assert entry.actor_user.username == "the-admin"
    page = client_for("admin").get(reverse("recovery:integrations")).content.decode()
    assert "BottleCRM (cases)" in page and "Check connection" in page


def test_a_ready_destination_is_said_to_be_ready(client_for, bottlecrm_row, destination):
    destination.then(200, listed()).then(200, {"user_obj": {"role": "ADMIN"}})
    destination.then(200, {"definitions": [{"key": "external_ref", "field_type": "text"}]})
    response = client_for("admin").post(reverse("recovery:check_integration", args=["crm"]))
    assert messages_of(response) == ["CRM: http://bottlecrm.test answered as expected. Ready."]


def test_only_admins_may_check_and_only_by_post(client_for, bottlecrm_row, destination):
    url = reverse("recovery:check_integration", args=["crm"])
    assert client_for("coordinator").post(url).status_code == 403
    assert client_for("admin").get(url).status_code == 405
    assert (
        client_for("admin").post(reverse("recovery:check_integration", args=["nope"])).status_code
        == 404
    )
    assert destination.calls == []
    assert not JournalEntry.objects.filter(action="ledger.integration.checked").exists()


# --- against the real sandbox: what a check and a delivery may store and show ----------------

SECRET = "crm-s3cret-token"


@pytest.fixture
def crm_with_token(integrations):
    Integration.objects.filter(name="crm").update(token=SECRET)
    return Integration.objects.get(name="crm")


def everything_stored() -> str:
    from ledger.models import Attempt, Operation

    return json.dumps(
        [
            list(JournalEntry.objects.values("reason", "evidence")),
            list(Attempt.objects.values()),
            list(Operation.objects.values("last_error_message", "result")),
        ],
        default=str,
    )


def test_a_check_against_a_destination_echoing_the_token_keeps_it_secret(
    client_for, crm_with_token, sandbox
):
    sandbox.fault("crm.lookup", "echo_headers")

    response = client_for("admin").post(reverse("recovery:check_integration", args=["crm"]))

    (said,) = messages_of(response)
    assert "HTTP 400, application/json" in said  # what came back, summarised
    assert "received headers" not in said  # never its content
    assert SECRET not in said and SECRET not in everything_stored()
    assert sandbox.stats()["faults_fired"] == {"crm.lookup": {"echo_headers": 1}}


def test_a_check_shows_a_summary_of_the_answer_never_its_body(client_for, crm_with_token, sandbox):
    """Pointed at a service that is not a destination, the check does not become a way to read
    it: the status, the content type and the length, no more."""
    sandbox.fault("crm.lookup", "error_422")
    response = client_for("admin").post(reverse("recovery:check_integration", args=["crm"]))
    (said,) = messages_of(response)
    assert "HTTP 422, application/json" in said and "characters" in said
    assert "sandbox fault" not in said and "unprocessable" not in said
    entry = JournalEntry.objects.get(action="ledger.integration.checked")
    assert "sandbox fault" not in json.dumps(entry.evidence)


def test_a_check_does_not_follow_a_redirect(client_for, crm_with_token, sandbox):
    sandbox.fault("crm.lookup", "redirect")
    response = client_for("admin").post(reverse("recovery:check_integration", args=["crm"]))
    (said,) = messages_of(response)
    assert "redirect" in said and "never follows" in said
    assert len(sandbox.stats()["paths"]) == 1  # the probe, and nothing it pointed to
    assert sum(sandbox.stats()["paths"].values()) == 1


def test_a_delivery_to_a_destination_echoing_the_token_stores_no_token(
    crm_with_token, approved_enquiry, run_queue, sandbox
):
    from ledger.models import Attempt

    sandbox.fault("crm.create", "echo_headers")
    _enquiry, op = approved_enquiry()

    run_queue(until=lambda: Attempt.objects.filter(operation=op).exists())

    attempt = Attempt.objects.get(operation=op)
    assert attempt.response_status == 400
    assert "Authorization" in (attempt.response_body or "")  # the echo reached the row...
    assert SECRET not in everything_stored()  # ...without the token
    assert sandbox.stats()["crm"]["total"] == 0


# --- against a hostile destination (tests/ledger/fixtures/hostile_answers.json) ---------------


@pytest.mark.parametrize(
    ("kind", "name", "token"),
    [
        ("handover", "deep_json", ""),
        ("handover", "deep_json_parsed", ""),
        ("bottlecrm", "gzip_bomb", "bcrm_pat_x"),
        ("bottlecrm", "huge_plain", "bcrm_pat_x"),
    ],
)
def test_a_check_against_a_hostile_answer_says_so_and_never_fails(
    client_for, integrations_rows, kind, name, token
):
    from tests.ledger.hostile import HostileServer, answer

    spec = answer(name)
    with HostileServer(spec) as server:
        Integration.objects.filter(name="crm").update(
            kind=kind, base_url=server.url, token=token, timeout_seconds=3.0
        )
        response = client_for("admin").post(reverse("recovery:check_integration", args=["crm"]))
    assert response.status_code == 302
    (said,) = messages_of(response)
    assert "Handover stopped reading it" in said and spec["words"] in said
    assert len(server.requests) == 1
    entry = JournalEntry.objects.get(action="ledger.integration.checked")
    assert spec["words"] in json.dumps(entry.evidence)


@override_settings(READ_BUDGET_SECONDS=3.0)
def test_a_check_of_a_dripping_calendar_ends_within_the_read_budget_as_too_slow(
    client_for, integrations_rows
):
    from tests.ledger.hostile import HostileServer, answer

    with HostileServer(answer("drip")) as server:
        Integration.objects.filter(name="appointments").update(
            kind="caldav", base_url=server.url + "/cal/", token="u:p", timeout_seconds=2.0
        )
        response = client_for("admin").post(
            reverse("recovery:check_integration", args=["appointments"])
        )
    assert response.status_code == 302
    (said,) = messages_of(response)
    assert "too slow to read: the answer took longer than 3 s" in said
    assert len(server.requests) == 1
