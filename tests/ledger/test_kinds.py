"""Connector kinds: the row narrows what the kind declares, the environment chooses the kind at
first seed, a row is validated for its kind, and ``check_integration`` says in plain words what
is wrong with a destination (its answers scripted at ``ledger.http.send``)."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import call_command

from ledger import http
from ledger.connectors.base import ConnectorError, ErrorKind
from ledger.connectors.bottlecrm import BottleCrmCaseCreate
from ledger.connectors.crm import CrmCreateConnector
from ledger.kinds import KINDS
from ledger.models import Integration, JournalEntry
from ledger.policies import POLICIES, connector_for
from tests.ledger.bottlecrm_fake import ScriptedDestination, listed

BASE = "http://bottlecrm.test"


@pytest.fixture
def destination(monkeypatch):
    scripted = ScriptedDestination()
    monkeypatch.setattr(http, "send", scripted.send)
    return scripted


@pytest.fixture
def rows(db):
    from ledger.integrations import ensure_integrations

    return ensure_integrations()


@pytest.fixture
def bottlecrm(rows):
    Integration.objects.filter(name="crm").update(
        kind="bottlecrm", base_url=BASE, token="bcrm_pat_x", timeout_seconds=1.0
    )
    rows["crm"].refresh_from_db()
    return rows["crm"]


# --- capabilities -------------------------------------------------------------------------------


def row(kind="handover", **fields):
    values = {
        "name": "crm",
        "kind": kind,
        "base_url": BASE,
        "token": "t",
        "supports_lookup": True,
        "supports_idempotency_key": True,
        "settle_delay_seconds": 0.0,
        **fields,
    }
    return Integration(**values)


def test_the_row_narrows_what_the_kind_declares_and_never_widens_it():
    assert row().capabilities.idempotency_key is True
    bottle = row("bottlecrm").capabilities
    assert bottle.idempotency_key is False  # declared absent: the row's True cannot add it
    assert bottle.lookup is True
    assert bottle.settle_delay_seconds == KINDS["bottlecrm"].declared.settle_delay_seconds > 0
    assert row("bottlecrm", supports_lookup=False).capabilities.lookup is False
    assert row("bottlecrm", settle_delay_seconds=90).capabilities.settle_delay_seconds == 90
    assert row(supports_idempotency_key=False).capabilities.idempotency_key is False


def test_every_action_has_a_connector_through_its_integrations_kind():
    assert POLICIES
    for policy in POLICIES.values():
        if policy.integration is None:
            assert policy.in_process is not None, policy.action
        else:
            assert KINDS["handover"].connector_class(policy.integration, policy.action)


def test_the_connector_comes_from_the_integrations_kind(bottlecrm):
    from ledger.models import Operation

    op = Operation(action="crm.create_enquiry", integration=bottlecrm)
    assert type(connector_for(op)) is BottleCrmCaseCreate
    bottlecrm.kind = "handover"
    assert type(connector_for(op)) is CrmCreateConnector


def test_a_row_is_validated_for_its_kind(rows):
    crm = rows["crm"]
    crm.kind, crm.token = "bottlecrm", ""
    with pytest.raises(ValidationError) as caught:
        crm.full_clean()
    assert "needs an API token" in str(caught.value.message_dict["token"])
    notify = rows["notify"]
    notify.kind, notify.token = "bottlecrm", "bcrm_pat_x"
    with pytest.raises(ValidationError) as caught:
        notify.full_clean()
    assert "cannot serve the Notifications integration" in str(caught.value.message_dict["kind"])
    crm.kind = "salesforce"
    with pytest.raises(ValidationError) as caught:
        crm.full_clean()
    assert "kind" in caught.value.message_dict


# --- seeding from the environment ---------------------------------------------------------------


def test_crm_kind_from_the_environment_at_first_seed(db, monkeypatch):
    from ledger.integrations import ensure_integrations

    monkeypatch.setenv("CRM_KIND", "bottlecrm")
    monkeypatch.setenv("CRM_BASE_URL", BASE)
    monkeypatch.setenv("CRM_TOKEN", "bcrm_pat_env")
    from ledger import integrations

    monkeypatch.setitem(integrations.settings.INTEGRATIONS, "crm", BASE)
    crm = ensure_integrations()["crm"]
    assert (crm.kind, crm.base_url, crm.token) == ("bottlecrm", BASE, "bcrm_pat_env")
    assert crm.supports_idempotency_key is False  # the kind's declaration is the default
    assert crm.settle_delay_seconds == KINDS["bottlecrm"].declared.settle_delay_seconds
    assert ensure_integrations()["notify"].kind == "handover"
    # After the first seed the row is the truth.
    monkeypatch.setenv("CRM_KIND", "handover")
    assert ensure_integrations()["crm"].kind == "bottlecrm"


def test_docs_kind_from_the_environment_at_first_seed(db, monkeypatch):
    from ledger.integrations import ensure_integrations

    monkeypatch.setenv("DOCS_KIND", "webdav")
    monkeypatch.setenv("DOCS_TOKEN", "handover:app-password")
    documents = ensure_integrations()["documents"]
    assert (documents.kind, documents.token) == ("webdav", "handover:app-password")
    # Reads only: nothing to look up and no key, whatever the row says.
    assert documents.capabilities.lookup is False
    assert documents.capabilities.idempotency_key is False
    assert ensure_integrations()["crm"].kind == "handover"


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("CRM_KIND", "dynamics", "not a known kind"),
        ("NOTIFY_KIND", "bottlecrm", "cannot serve the notify integration"),
        ("CRM_KIND", "webdav", "cannot serve the crm integration"),
    ],
)
def test_an_impossible_kind_in_the_environment_stops_the_seed(
    db, monkeypatch, variable, value, words
):
    from ledger.integrations import ensure_integrations

    monkeypatch.setenv(variable, value)
    with pytest.raises(ImproperlyConfigured, match=words):
        ensure_integrations()
    assert not Integration.objects.exists()


# --- checking a destination ---------------------------------------------------------------------

ADMIN = {"user_obj": {"role": "ADMIN"}}
DEFINED = {
    "definitions": [
        {"key": "external_ref", "field_type": "text", "is_active": True, "is_required": False}
    ],
    "totals": None,
}


def check(*args):
    out = io.StringIO()
    try:
        call_command("check_integration", *args, stdout=out)
    except SystemExit as exit_:
        return exit_.code, out.getvalue()
    return 0, out.getvalue()


def test_a_ready_bottlecrm_passes_and_the_check_is_journalled(bottlecrm, destination):
    destination.then(200, listed()).then(200, ADMIN).then(200, DEFINED)

    code, out = check("crm")

    assert code == 0, out
    assert "ready: nothing wrong found" in out
    lookup, profile, fields = destination.calls
    assert profile.url == f"{BASE}/api/profile/"
    assert lookup.url == f"{BASE}/api/cases/" and lookup.params["cf_external_ref"]
    assert (fields.url, fields.params["target_model"]) == (f"{BASE}/api/custom-fields/", "Case")
    entry = JournalEntry.objects.get(action="ledger.integration.checked")
    assert (entry.reason, entry.evidence["problems"], entry.actor) == (
        "ready",
        [],
        "system:check_integration",
    )


@pytest.mark.parametrize(
    ("answers", "words"),
    [
        (
            [ConnectorError(ErrorKind.TRANSIENT, "not connected: [Errno 111] Connection refused")],
            "Cannot reach http://bottlecrm.test: nothing is listening at that address and port",
        ),
        (
            # What came back, summarised: a check never shows the destination's body.
            [(403, {"detail": "Organization context is required."})],
            "refused Handover's credentials (HTTP 403, application/json, 47 characters)",
        ),
        ([(404, "<h1>Not Found</h1>")], "is the address the destination's API root?"),
        ([(500, "Server Error")], "look-up by 'external_ref' is not answering"),
        (
            [(200, listed()), (200, ADMIN), (200, {"definitions": [], "totals": None})],
            "The custom field 'external_ref' is not defined for cases",
        ),
        (
            [
                (200, listed()),
                (200, ADMIN),
                (
                    200,
                    {
                        "definitions": [
                            *DEFINED["definitions"],
                            {"key": "ward", "is_active": True, "is_required": True},
                        ]
                    },
                ),
            ],
            "requires the case field 'ward'",
        ),
        (
            [
                (200, listed()),
                (200, ADMIN),
                (200, {"definitions": [{"key": "external_ref", "field_type": "number"}]}),
            ],
            "is a number field",
        ),
        (
            [(200, listed()), (200, {"user_obj": {"role": "USER"}}), (200, DEFINED)],
            "The token belongs to a USER profile, not an ADMIN one",
        ),
    ],
)
def test_each_problem_is_said_in_plain_words_and_fails_the_command(
    bottlecrm, destination, answers, words
):
    for answer in answers:
        destination.then(*answer) if isinstance(answer, tuple) else destination.then(answer)

    code, out = check("crm")

    assert code == 1
    assert words in out, out
    entry = JournalEntry.objects.get(action="ledger.integration.checked")
    assert any(words in problem for problem in entry.evidence["problems"])


def test_a_bottlecrm_row_without_a_token_is_refused_before_any_call(bottlecrm, destination):
    Integration.objects.filter(pk=bottlecrm.pk).update(token="")
    code, out = check("crm")
    assert code == 1 and "BottleCRM needs an API token" in out
    assert destination.calls == []


def test_the_handover_kind_checks_its_look_up(rows, destination):
    destination.then(501, {"error": "lookup disabled"})
    code, out = check("crm")
    assert code == 1 and "cannot be looked up by reference (501)" in out
    Integration.objects.filter(name="crm").update(supports_lookup=False)
    destination.then(501, {"error": "lookup disabled"})
    assert check("crm")[0] == 0


def test_the_admin_edits_the_kind_and_refuses_what_the_kind_cannot_use(rows, admin_client):
    crm = rows["crm"]
    url = f"/admin/ledger/integration/{crm.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200 and 'name="kind"' in page.content.decode()
    form = {
        "kind": "bottlecrm",
        "base_url": BASE,
        "token": "",
        "timeout_seconds": "2",
        "retry_budget": "3",
        "backoff_seconds": "1",
        "supports_lookup": "on",
        "settle_delay_seconds": "0",
        "max_age_seconds": "300",
        "owner": "",
    }
    refused = admin_client.post(url, form)
    assert refused.status_code == 200
    assert "BottleCRM needs an API token." in refused.content.decode()
    crm.refresh_from_db()
    assert crm.kind == "handover"
    assert admin_client.post(url, {**form, "token": "bcrm_pat_x"}).status_code == 302
    crm.refresh_from_db()
    assert (crm.kind, crm.token) == ("bottlecrm", "bcrm_pat_x")


def test_check_all_checks_every_integration(rows, destination):
    """README's ``check_integration --all`` (argparse refused it: "invalid choice: []")."""
    destination.then(200, {"enquiries": []}).then(200, {"messages": []})
    destination.then(404, {"error": "not_found"}).then(200, {"slots": []})

    code, out = check("--all")

    assert code == 0, out
    checked = JournalEntry.objects.filter(action="ledger.integration.checked")
    assert checked.count() == 4
    assert [c.url.split("/", 3)[3].split("/")[0] for c in destination.calls] == [
        "crm",
        "notify",
        "docs",
        "appointments",
    ]


def test_an_unknown_name_is_said_and_nothing_is_called(rows, destination):
    with pytest.raises(Exception, match="No integration called 'nope'"):
        check("nope")
    assert destination.calls == []


def test_a_document_store_with_nothing_listening_is_not_ready(rows, destination):
    """It said "ready: nothing wrong found" without calling anything."""
    destination.then(
        ConnectorError(ErrorKind.TRANSIENT, "not connected: [Errno 111] Connection refused")
    )

    code, out = check("documents")

    assert code == 1
    assert "nothing is listening at that address and port" in out
    assert "ready" not in out
    assert len(destination.calls) == 1


@pytest.mark.django_db
def test_a_kind_registered_by_the_destinations_layer_is_a_choice_without_a_migration(
    monkeypatch,
):
    """Adding a kind touches nothing below ledger.kinds: the model reads the registry, so a new
    kind is offered by every form and the migrations see no change."""
    from ledger import models

    example = type("ExampleKind", (KINDS["handover"].__class__,), {"key": "example"})()
    monkeypatch.setitem(models.KINDS, "example", example)
    monkeypatch.setitem(models.KIND_LABELS, "example", "Example API")
    assert ("example", "Example API") in list(Integration._meta.get_field("kind").choices)
    row = Integration(name=Integration.CRM, kind="example", base_url="http://example.test")
    assert row.capabilities == example.declared
    call_command("makemigrations", "ledger", "--check", "--dry-run", stdout=io.StringIO())
