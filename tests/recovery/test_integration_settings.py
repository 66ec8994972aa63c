"""Admins edit an integration's settings in the console: permission-checked, validated (the
timeout order), every change journalled with a reason, field by field, never the token."""

import json

import pytest
from django.contrib.messages import get_messages
from django.core.exceptions import ValidationError
from django.urls import reverse

from ledger import services as ledger_services
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


def test_a_new_address_needs_the_token_typed_again(crm, client_for):
    """The stored token was entered for the old address: it is never sent to a new one."""
    client = client_for("admin")
    moved = form_data(crm, base_url="https://elsewhere.example.org")

    refused = client.post(URL, moved)

    assert refused.status_code == 400
    assert "type the token for the new address again" in refused.content.decode()
    row = Integration.objects.get(pk=crm.pk)
    assert (row.base_url, row.token) == (crm.base_url, "old-s3cret-token")
    assert not changes().exists()

    assert client.post(URL, {**moved, "token": "new-s3cret-token"}).status_code == 302
    row = Integration.objects.get(pk=crm.pk)
    assert (row.base_url, row.token) == ("https://elsewhere.example.org", "new-s3cret-token")
    assert (
        client.post(
            URL, form_data(row, base_url="https://third.example.org", remove_token="on")
        ).status_code
        == 302
    )
    row = Integration.objects.get(pk=crm.pk)
    assert (row.base_url, row.token) == ("https://third.example.org", "")
    assert [e.evidence.get("token") for e in changes().order_by("at", "id")] == [
        "changed",
        "removed",
    ]


def test_the_service_refuses_a_new_address_with_the_old_token(crm, people):
    with pytest.raises(ValidationError) as refused:
        ledger_services.configure_integration(
            "crm",
            actor=people["admin"],
            reason="moving",
            changes={"base_url": "https://elsewhere.example.org"},
        )
    assert "token" in refused.value.message_dict
    assert Integration.objects.get(pk=crm.pk).base_url == crm.base_url


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
        ({"base_url": "javascript:alert(1)"}, "base_url", "start with http:// or https://"),
        ({"base_url": "http://u:p@crm.example.org"}, "base_url", "user name or password"),
        ({"base_url": "http://crm.example.org:99999"}, "base_url", "from 1 to 65535"),
        ({"base_url": "http://[::1]:0"}, "base_url", "from 1 to 65535"),
        ({"base_url": "http://crm.example.org:٣"}, "base_url", "from 1 to 65535"),
        ({"base_url": "https://crm.example.org/?next=/"}, "base_url", "query"),
        ({"base_url": "http://[::1"}, "base_url", "not a valid host"),
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


def test_notifications_become_e_mail_in_the_form_validated_for_that_kind(
    integrations_rows, client_for
):
    notify = integrations_rows["notify"]
    url = reverse("recovery:integration-settings", args=["notify"])
    client = client_for("admin")
    # The smtp kind with an http address, and an address carrying a password: refused, named.
    for address, says in [
        (notify.base_url, "takes an address starting smtp://"),
        ("smtp://user:pw@relay.example.org:25", "put the credential in the"),
    ]:
        response = client.post(url, form_data(notify, kind="smtp", base_url=address))
        assert response.status_code == 400
        assert says in response.content.decode()
        assert Integration.objects.get(pk=notify.pk).kind == "handover"
    response = client.post(
        url,
        form_data(
            notify,
            kind="smtp",
            base_url="smtp+starttls://handover@relay.example.org:587",
            token="relay-password",
            reason="mail goes through the council's relay",
        ),
    )
    assert response.status_code == 302
    row = Integration.objects.get(pk=notify.pk)
    assert (row.kind, row.base_url, row.token) == (
        "smtp",
        "smtp+starttls://handover@relay.example.org:587",
        "relay-password",
    )
    (entry,) = changes()
    assert entry.evidence["token"] == "set" or entry.evidence["token"] == "changed"
    assert "relay-password" not in json.dumps(entry.evidence)
    # And the CRM cannot be e-mail.
    response = client.post(URL, form_data(integrations_rows["crm"], kind="smtp"))
    assert response.status_code == 400


def test_the_appointments_maximum_age_is_edited_there_only_and_bounded(
    integrations_rows, client_for
):
    row = integrations_rows["appointments"]
    url = reverse("recovery:integration-settings", args=["appointments"])
    admin = client_for("admin")
    assert "Read again after" in admin.get(url).content.decode()
    assert "Read again after" not in admin.get(URL).content.decode()  # the CRM's: no reads
    for typed in ("5 s", "2 d", "soon"):
        refused = admin.post(url, form_data(row, max_age_seconds=typed))
        assert refused.status_code == 400, typed
        assert Integration.objects.get(pk=row.pk).max_age_seconds == 300.0
    saved = admin.post(url, form_data(row, max_age_seconds="10 min"))
    assert saved.status_code == 302
    assert Integration.objects.get(pk=row.pk).max_age_seconds == 600.0
    [entry] = changes()
    assert entry.evidence["max_age_seconds"] == {"from": 300.0, "to": 600.0}


BAD_RATES = ["1e-12", "1e-300", "5e-324", "٣", "1_000", "inf", "nan", "-1", "0.001", "20000"]


@pytest.mark.parametrize("rate", BAD_RATES)
def test_a_rate_outside_the_rule_is_refused_on_the_form(crm, client_for, rate):
    response = client_for("admin").post(URL, form_data(crm, max_requests_per_second=rate))
    assert response.status_code == 400
    page = response.content.decode()
    assert "calls per second" in page  # the rule, said on the field
    assert Integration.objects.get(pk=crm.pk).max_requests_per_second is None
    assert not changes().exists()


@pytest.mark.parametrize(("rate", "stored"), [("25", 25.0), ("0.5", 0.5), ("0", None), ("", None)])
def test_a_rate_within_the_rule_is_saved(crm, client_for, rate, stored):
    Integration.objects.filter(pk=crm.pk).update(max_requests_per_second=7.0)
    crm.refresh_from_db()
    response = client_for("admin").post(URL, form_data(crm, max_requests_per_second=rate))
    assert response.status_code == 302
    assert Integration.objects.get(pk=crm.pk).max_requests_per_second == stored


def test_the_integrations_page_says_e_mail_is_retried_for_its_window(
    integrations_rows, client_for, settings
):
    settings.EMAIL_RETRY_HOURS = 24.0
    Integration.objects.filter(name="notify").update(
        kind="smtp", base_url="smtp://127.0.0.1:2525", supports_lookup=False
    )
    page = client_for("admin").get(reverse("recovery:integrations")).content.decode()
    notify = page[page.index('id="integration-notify"') :].split("</section>")[0]
    crm = page[page.index('id="integration-crm"') :].split("</section>")[0]
    assert "as e-mail is" in notify and "EMAIL_RETRY_" in notify
    assert "attempt" not in notify.split("Retried")[0].split("Timeout")[1]
    assert "as e-mail is" not in crm and "first retry after" in crm


def test_reads_share_is_shown_edited_with_a_reason_journalled_and_bounded(
    integrations_rows, client_for, settings
):
    """Only where Handover reads (documents, appointments); from 1 to READS_MAX_IN_FLIGHT, so
    that reads never take every worker from writes and messages."""
    settings.READS_MAX_IN_FLIGHT = 3
    settings.READS_PER_ENQUIRY = 2
    row = integrations_rows["documents"]
    url = reverse("recovery:integration-settings", args=["documents"])
    admin = client_for("admin")
    assert "Reads&#x27; share of the workers" in admin.get(url).content.decode()
    assert "Reads&#x27; share of the workers" not in admin.get(URL).content.decode()  # the CRM's
    listing = admin.get(reverse("recovery:integrations")).content.decode()
    assert "at most 3 in flight at once (the default), 2 per enquiry" in listing
    for typed in ("0", "4", "-1", "two", "٣"):
        refused = admin.post(url, form_data(row, read_share=typed))
        assert refused.status_code == 400, typed
        assert Integration.objects.get(pk=row.pk).read_share is None
    saved = admin.post(url, form_data(row, read_share="2"))
    assert saved.status_code == 302
    assert Integration.objects.get(pk=row.pk).read_share == 2
    [entry] = changes()
    assert entry.evidence["read_share"] == {"from": None, "to": 2}
    assert entry.reason == "tuning after the incident"
    listing = admin.get(reverse("recovery:integrations")).content.decode()
    assert "at most 2 in flight at once, 2 per enquiry" in listing
