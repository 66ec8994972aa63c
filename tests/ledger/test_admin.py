"""The Django admin's integration page: the token is never rendered, a new address needs the
token again, and an address breaking the one rule (config.destinations) is refused."""

import json

import pytest
from django.urls import reverse

from ledger.models import Integration, JournalEntry

SECRET = "adm-s3cret-token"


@pytest.fixture
def admin_page(integrations, make_user, client):
    """(client, url, crm row) for the CRM's admin page, the row holding SECRET."""
    Integration.objects.filter(name="crm").update(token=SECRET)
    crm = Integration.objects.get(name="crm")
    client.force_login(make_user("admin", is_staff=True, is_superuser=True))
    return client, reverse("admin:ledger_integration_change", args=[crm.pk]), crm


def _as_posted(client, url, **changes):
    form = client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None}
    data.update({"owner": "", "token": "", **changes})
    return data


def test_the_token_is_never_rendered_only_that_one_is_set(admin_page):
    client, url, _crm = admin_page
    html = client.get(url).content.decode()
    assert SECRET not in html
    assert "A token is set" in html and 'type="password"' in html


def test_saving_without_typing_keeps_the_token(admin_page):
    client, url, crm = admin_page
    response = client.post(url, _as_posted(client, url, timeout_seconds="2.0"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Integration.objects.get(pk=crm.pk).token == SECRET


def test_a_new_address_needs_the_token_again_or_its_removal(admin_page):
    client, url, crm = admin_page

    refused = client.post(url, _as_posted(client, url, base_url="https://elsewhere.example.org"))

    assert refused.status_code == 200
    assert "type the token for the new address again" in refused.content.decode()
    row = Integration.objects.get(pk=crm.pk)
    assert (row.base_url, row.token) == (crm.base_url, SECRET)

    cleared = client.post(
        url,
        _as_posted(client, url, base_url="https://elsewhere.example.org", remove_token="on"),
    )
    assert cleared.status_code == 302
    row = Integration.objects.get(pk=crm.pk)
    assert (row.base_url, row.token) == ("https://elsewhere.example.org", "")
    entry = JournalEntry.objects.get(action="ledger.integration.changed")
    assert entry.evidence["changes"]["token"] == ["(hidden)", "(removed)"]
    assert SECRET not in json.dumps(list(JournalEntry.objects.values("evidence", "reason")))


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("http://user:pass@crm.example.org", "user name or password"),
        ("http://crm.example.org:99999", "from 1 to 65535"),
        ("gopher://crm.example.org", "http:// or https://"),
    ],
)
def test_an_address_breaking_the_rule_is_refused(admin_page, address, says):
    client, url, crm = admin_page
    response = client.post(url, _as_posted(client, url, base_url=address, token="typed-again"))
    assert response.status_code == 200
    assert says in response.content.decode()
    assert Integration.objects.get(pk=crm.pk).base_url == crm.base_url
