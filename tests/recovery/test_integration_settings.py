"""Admins edit an integration's settings in the console: permission-checked, validated (the
timeout order), every change journalled with a reason, field by field, never the token."""

import json

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from ledger.models import Integration, JournalEntry

URL = reverse("recovery:integration-settings", args=["crm"])


def form_data(row, **changes):
    """What the page posts when nothing is touched, with ``changes`` typed over it."""
    data = {
        "kind": row.kind,
        "base_url": row.base_url,
        "token": "",
        "owner": row.owner_id or "",
        "timeout_seconds": f"{row.timeout_seconds} s",
        "retry_budget": row.retry_budget,
        "backoff_seconds": f"{row.backoff_seconds} s",
        "settle_delay_seconds": f"{row.settle_delay_seconds} s",
        "reason": "tuning after the incident",
    }
    if row.supports_lookup:
        data["supports_lookup"] = "on"
    if row.supports_idempotency_key:
        data["supports_idempotency_key"] = "on"
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def changes():
    return JournalEntry.objects.filter(action="ledger.integration.configured")


@pytest.fixture
def crm(integrations_rows):
    row = integrations_rows["crm"]
    Integration.objects.filter(pk=row.pk).update(token="old-s3cret-token", timeout_seconds=10.0)
    row.refresh_from_db()
    return row


def test_only_admins_may_open_or_post(crm, client_for):
    for role in ("coordinator", "reviewer"):
        client = client_for(role)
        assert client.get(URL).status_code == 403
        assert client.post(URL, form_data(crm, timeout_seconds="5 s")).status_code == 403
    assert Integration.objects.get(pk=crm.pk).timeout_seconds == 10.0
    assert not changes()
    assert client_for("admin").get(URL).status_code == 200
    page = client_for("admin").get(reverse("recovery:integrations")).content.decode()
    assert URL in page
    assert (
        URL not in client_for("coordinator").get(reverse("recovery:integrations")).content.decode()
    )


def test_the_form_shows_durations_as_people_write_them_and_never_the_token(crm, client_for):
    html = client_for("admin").get(URL).content.decode()
    assert 'value="10 s"' in html and 'value="2 s"' in html
    assert "old-s3cret-token" not in html


def test_a_change_is_saved_and_journalled_field_by_field(crm, client_for, people):
    response = client_for("admin").post(
        URL,
        form_data(
            crm,
            timeout_seconds="2.5 s",
            settle_delay_seconds="1 min 30 s",
            owner=people["coordinator"].pk,
            supports_idempotency_key=None,  # unticked
        ),
    )
    assert response.status_code == 302
    row = Integration.objects.get(pk=crm.pk)
    assert (row.timeout_seconds, row.settle_delay_seconds) == (2.5, 90.0)
    assert row.owner == people["coordinator"] and not row.supports_idempotency_key
    assert row.token == "old-s3cret-token"  # an empty token field keeps it
    (entry,) = changes()
    assert entry.reason == "tuning after the incident"
    assert entry.actor_user == people["admin"]
    assert entry.evidence == {
        "owner": {"from": None, "to": people["coordinator"].username},
        "timeout_seconds": {"from": 10.0, "to": 2.5},
        "supports_idempotency_key": {"from": True, "to": False},
        "settle_delay_seconds": {"from": 0.0, "to": 90.0},
    }
    messages = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("CRM settings saved" in m and "timeout per call" in m for m in messages)
    html = client_for("admin").get(URL).content.decode()
    assert "10 s → 2.5 s" in html and "0 s → 1 min 30 s" in html


def test_the_token_is_journalled_as_changed_never_its_value(crm, client_for):
    client = client_for("admin")
    assert client.post(URL, form_data(crm, token="new-s3cret-token")).status_code == 302
    assert Integration.objects.get(pk=crm.pk).token == "new-s3cret-token"
    assert client.post(URL, form_data(crm, remove_token="on", reason="revoked")).status_code == 302
    assert Integration.objects.get(pk=crm.pk).token == ""
    assert [e.evidence for e in changes().order_by("at", "id")] == [
        {"token": "changed"},
        {"token": "removed"},
    ]
    everything = json.dumps(list(JournalEntry.objects.values("evidence", "reason")))
    assert "s3cret" not in everything
    html = client.get(URL).content.decode()
    assert "s3cret" not in html and "changed" in html and "removed" in html


@pytest.mark.parametrize(
    "changes_,field,says",
    [
        ({"timeout_seconds": "60 s"}, "timeout_seconds", "shorter than the workers' timeout"),
        ({"timeout_seconds": "2 min"}, "timeout_seconds", "shorter than the workers' timeout"),
        ({"timeout_seconds": "0 s"}, "timeout_seconds", "At least 0.1 s."),
        ({"timeout_seconds": "10"}, "timeout_seconds", "needs a unit"),
        ({"timeout_seconds": "1 day, 0:00:00"}, "timeout_seconds", "is not a duration"),
        ({"settle_delay_seconds": "3 x"}, "settle_delay_seconds", "“x” in “3 x” is not a unit"),
        ({"retry_budget": "0"}, "retry_budget", "a whole number of attempts from 1 to 20"),
        ({"retry_budget": "²"}, "retry_budget", "a whole number of attempts from 1 to 20"),
        ({"base_url": "javascript:alert(1)"}, "base_url", "starting http:// or https://"),
        ({"base_url": "http://" + "a" * 3000 + ".org"}, "base_url", ""),
        ({"reason": ""}, "reason", "Give a reason"),
        ({"owner": "99999"}, "owner", "Select a valid choice"),
    ],
)
def test_refused_changes_name_the_field_and_change_nothing(crm, client_for, changes_, field, says):
    response = client_for("admin").post(URL, form_data(crm, **changes_))
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors and says in " ".join(errors[field])
    assert "Enter a valid duration" not in response.content.decode()
    row = Integration.objects.get(pk=crm.pk)
    assert (row.timeout_seconds, row.retry_budget, row.base_url) == (
        crm.timeout_seconds,
        crm.retry_budget,
        crm.base_url,
    )
    assert not changes()


def test_the_input_is_kept_when_refused(crm, client_for):
    html = (
        client_for("admin")
        .post(
            URL, form_data(crm, timeout_seconds="2 min", settle_delay_seconds="45 s", reason="why")
        )
        .content.decode()
    )
    assert 'value="2 min"' in html and 'value="45 s"' in html and "why</textarea>" in html


def test_the_cluster_order_is_checked_too(crm, client_for, settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 60, "retry": 60}
    response = client_for("admin").post(URL, form_data(crm, timeout_seconds="5 s"))
    assert response.status_code == 400
    assert "must be shorter than their retry (Q_RETRY=60 s)" in response.content.decode()
    assert not changes()


def test_nothing_changed_is_said(crm, client_for):
    response = client_for("admin").post(URL, form_data(crm))
    assert response.status_code == 400
    assert "Nothing changed" in response.content.decode()
    assert not changes()


def test_unknown_integration_is_404(client_for, integrations_rows):
    url = reverse("recovery:integration-settings", args=["fax"])
    assert client_for("admin").get(url).status_code == 404


def test_the_service_refuses_other_fields_and_other_roles(crm, people):
    from django.core.exceptions import PermissionDenied

    from ledger import services

    with pytest.raises(services.ActionRefused, match="Not configurable here: paused"):
        services.configure_integration(
            "crm", actor=people["admin"], reason="sneaky", changes={"paused": True}
        )
    with pytest.raises(PermissionDenied):
        services.configure_integration(
            "crm", actor=people["coordinator"], reason="x", changes={"retry_budget": 5}
        )
    with pytest.raises(services.ActionRefused, match="reason"):
        services.configure_integration(
            "crm", actor=people["admin"], reason=" ", changes={"retry_budget": 5}
        )
    assert not Integration.objects.get(pk=crm.pk).paused
    assert Integration.objects.get(pk=crm.pk).retry_budget == crm.retry_budget
    assert not changes()


def test_the_kind_is_edited_with_the_row_and_validated_for_that_kind(crm, client_for):
    admin = client_for("admin")
    # BottleCRM needs a token: asking to remove it while switching kind is refused, nothing saved.
    refused = admin.post(URL, form_data(crm, kind="bottlecrm", remove_token="on"))
    assert refused.status_code == 400
    assert Integration.objects.get(pk=crm.pk).kind == "handover"
    assert not changes()
    saved = admin.post(URL, form_data(crm, kind="bottlecrm"))
    assert saved.status_code == 302
    assert Integration.objects.get(pk=crm.pk).kind == "bottlecrm"
    [entry] = changes()
    assert entry.evidence["kind"] == {"from": "handover", "to": "bottlecrm"}


def test_the_limits_are_edited_with_the_row_and_journalled(crm, client_for):
    admin = client_for("admin")
    refused = admin.post(URL, form_data(crm, max_requests_per_second="-3"))
    assert refused.status_code == 400
    assert Integration.objects.get(pk=crm.pk).max_requests_per_second is None
    saved = admin.post(URL, form_data(crm, max_requests_per_second="40", max_in_flight="4"))
    assert saved.status_code == 302
    row = Integration.objects.get(pk=crm.pk)
    assert (row.max_requests_per_second, row.max_in_flight) == (40.0, 4)
    [entry] = changes()
    assert entry.evidence["max_requests_per_second"] == {"from": None, "to": 40.0}
    assert entry.evidence["max_in_flight"] == {"from": None, "to": 4}
