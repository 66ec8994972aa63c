"""The integrations page's "Check connection": admins only, POST only, journalled, and the
destination's problems said on the page."""

import pytest
from django.contrib.messages import get_messages
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
