"""A fresh install says what it lacks (system checks and the admins' banner), and the setup
pages clear it: from a database with nothing but a superuser."""

from __future__ import annotations

import io
from urllib.parse import quote

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from ledger import http
from ledger.models import Integration, JournalEntry
from recovery.models import Queue, ResponsePolicy
from recovery.readiness import findings
from tests.ledger.bottlecrm_fake import ScriptedDestination

ALL = [
    "handover.W101",
    "handover.W102",
    "handover.W103",
    "handover.W104",
    "handover.W105",
    "handover.W106",
    "handover.W107",
    "handover.W109",
]


@pytest.fixture
def superuser(db, roles):
    from ledger.integrations import ensure_integrations

    ensure_integrations()
    return get_user_model().objects.create_superuser("root", "root@example.org", "pw-only-tests")


@pytest.fixture
def root(superuser):
    client = Client()
    client.force_login(superuser)
    return client


def checks() -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("check", stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def test_a_fresh_install_says_everything_it_lacks(root):
    assert [f.id for f in findings()] == ALL
    said = checks()
    for check_id in ALL:
        assert check_id in said, said

    page = root.get(reverse("recovery:queue")).content.decode()
    assert "Not ready to go live: 8 things to set up" in page
    assert "Nobody owns these queues" in page and "Operation outcome unknown" in page
    assert "E-mail is not configured" in page


def test_only_admins_see_the_banner(root, make_user):
    coordinator = make_user("coordinator")
    client = Client()
    client.force_login(coordinator)
    page = client.get(reverse("recovery:queue")).content.decode()
    assert "Not ready to go live" not in page
    assert "Not ready to go live" in root.get(reverse("recovery:dashboard")).content.decode()


@pytest.mark.slow
def test_the_setup_pages_clear_every_finding(root, superuser, monkeypatch, tmp_path):
    # 1. People: a reviewer, and the superuser takes the admin role (staff comes with it).
    reviewer = get_user_model().objects.create_user(
        "rita", email="rita@example.org", password="pw-only-tests"
    )
    for person, role in ((reviewer, "reviewer"), (superuser, "admin")):
        response = root.post(
            reverse("recovery:person", args=[person.pk]),
            {
                "roles": [role],
                "email": person.email,
                "reason": "go-live: named in the service plan",
            },
        )
        assert response.status_code == 302, response.content.decode()[:2000]
    # 2. Queues: one default row owned by the admin, the review queue by the reviewer.
    response = root.post(
        reverse("recovery:setup-queue", args=["default"]),
        {
            "owner": superuser.pk,
            "backup_owner": "",
            "response_period": "4 h",
            "review_cadence": "1 d",
            "reason": "go-live defaults",
        },
    )
    assert response.status_code == 302
    # 3. E-mail: notifications go through the council's relay (a real SMTP server here), set on
    # the integration's settings page.
    from harness.mailserver import MailServer

    with MailServer(tmp_path / "mail") as relay:
        response = root.post(
            reverse("recovery:integration-settings", args=["notify"]),
            {
                **_integration_form("notify"),
                "kind": "smtp",
                "base_url": relay.url,
                "reason": "residents are written to through the council's relay",
            },
        )
        assert response.status_code == 302, response.content.decode()[:2000]
        # 4. Integrations: each owned by the admin, then checked from the console (the HTTP
        # destinations' answers scripted; the relay answers for itself).
        for name in ("crm", "notify", "documents", "appointments"):
            response = root.post(
                reverse("recovery:integration-settings", args=[name]),
                {**_integration_form(name), "owner": superuser.pk, "reason": "the admin owns it"},
            )
            assert response.status_code == 302, response.content.decode()[:2000]
        scripted = ScriptedDestination()
        monkeypatch.setattr(http, "send", scripted.send)
        scripted.then(200, {"enquiries": []})
        scripted.then(404, {"error": "not_found"}).then(200, {"slots": []})
        for name in ("crm", "notify", "documents", "appointments"):
            root.post(reverse("recovery:check_integration", args=[name]))

    # 5. Categories: the council's first.
    response = root.post(
        reverse("recovery:setup-category-new"),
        {
            "slug": "waste",
            "name": "Bins and waste",
            "keywords": "bin\nrecycling",
            "active": "on",
            "tells_resident": "on",
            "reason": "go-live categories",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]

    assert findings() == []
    assert "handover.W1" not in checks()
    assert "Not ready to go live" not in root.get(reverse("recovery:queue")).content.decode()

    # Every change is in the journal, field by field, with its reason.
    created = JournalEntry.objects.get(action="recovery.policy.created")
    assert created.reason == "go-live defaults"
    assert created.evidence["owner"] == {"from": None, "to": "root"}
    assert created.evidence["response_period"] == {"from": None, "to": 4 * 3600.0}
    person = JournalEntry.objects.get(action="recovery.person.roles", subject_id=str(superuser.pk))
    assert person.evidence["roles"] == {"from": [], "to": ["admin"]}
    superuser.refresh_from_db()
    assert superuser.is_staff and superuser.groups.filter(name="admin").exists()


def test_a_change_after_the_check_asks_for_another(root, superuser, monkeypatch):
    scripted = ScriptedDestination().then(200, {"enquiries": []})
    monkeypatch.setattr(http, "send", scripted.send)
    root.post(reverse("recovery:check_integration", args=["crm"]))
    assert "CRM" not in str([f.text for f in findings() if f.id == "handover.W103"])
    root.post(
        reverse("recovery:integration-settings", args=["crm"]),
        {**_integration_form("crm"), "retry_budget": 5, "reason": "the CRM asked"},
    )
    late = next(f for f in findings() if f.id == "handover.W103")
    assert "CRM" in str(late.text)


def _integration_form(name):
    from recovery.forms import IntegrationForm

    form = IntegrationForm(instance=Integration.objects.get(name=name))
    data = {}
    for field in form:
        value = field.value()
        if value is None or value is False:
            continue
        data[field.name] = (
            field.field.prepare_value(value) if hasattr(field.field, "prepare_value") else value
        )
    return data


def test_a_queue_change_is_journalled_field_by_field_and_a_same_save_writes_nothing(
    root, superuser
):
    url = reverse("recovery:setup-queue", args=[Queue.FAILED])
    form = {"owner": "", "backup_owner": "", "response_period": "2 h", "review_cadence": "1 d"}
    assert root.post(url, {**form, "reason": "first"}).status_code == 302
    assert (
        root.post(url, {**form, "response_period": "30 min", "reason": "faster"}).status_code == 302
    )
    assert (
        root.post(url, {**form, "response_period": "30 min", "reason": "again"}).status_code == 302
    )
    rows = JournalEntry.objects.filter(subject_type="recovery.responsepolicy").order_by("id")
    assert [r.action for r in rows] == ["recovery.policy.created", "recovery.policy.configured"]
    assert rows[1].evidence == {
        "queue": "failed",
        "response_period": {"from": 7200.0, "to": 1800.0},
    }
    page = root.get(url).content.decode()
    assert "2 h → 30 min" in page and "faster" in page
    assert ResponsePolicy.objects.get(queue="failed").response_period.total_seconds() == 1800


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("response_period", "soon", "response_period"),
        ("response_period", "0 s", "at least"),
        ("reason", "\u200b", "reason"),
    ],
)
def test_a_bad_queue_value_is_refused_on_the_form(root, superuser, field, value, words):
    form = {
        "owner": "",
        "backup_owner": "",
        "response_period": "2 h",
        "review_cadence": "1 d",
        "reason": "why",
    }
    response = root.post(reverse("recovery:setup-queue", args=["failed"]), {**form, field: value})
    assert response.status_code == 400
    assert "Nothing was saved" in response.content.decode()
    assert not ResponsePolicy.objects.exists()
    assert not JournalEntry.objects.filter(subject_type="recovery.responsepolicy").exists()


def test_categories_are_added_and_changed_with_a_reason(root, superuser):
    response = root.post(
        reverse("recovery:setup-category-new"),
        {
            "slug": "waste",
            "name": "Bins and waste",
            "keywords": "bin\nrecycling",
            "active": "on",
            "reason": "the council's services",
        },
    )
    assert response.status_code == 302
    response = root.post(
        reverse("recovery:setup-category", args=["waste"]),
        {
            "slug": "ignored",
            "name": "Bins and waste",
            "keywords": "bin\nrecycling",
            "reason": "retired: the service moved",
        },
    )
    assert response.status_code == 302
    actions = list(
        JournalEntry.objects.filter(subject_type="intake.category").values_list(
            "action", "evidence"
        )
    )
    assert actions[0][0] == "intake.category.created"
    assert actions[1] == (
        "intake.category.configured",
        {"slug": "waste", "active": {"from": True, "to": False}},
    )
    from intake.models import Category

    assert Category.objects.get().slug == "waste"


def test_a_person_without_the_permission_gets_403(make_user):
    coordinator = make_user("coordinator")
    client = Client()
    client.force_login(coordinator)
    for url in (
        reverse("recovery:setup"),
        reverse("recovery:people"),
        reverse("recovery:person", args=[coordinator.pk]),
        reverse("recovery:setup-queue", args=["default"]),
    ):
        assert client.get(url).status_code == 403, url
    assert (
        client.post(
            reverse("recovery:person", args=[coordinator.pk]), {"roles": ["admin"], "reason": "me"}
        ).status_code
        == 403
    )
    assert not coordinator.groups.filter(name="admin").exists()


def test_an_admin_role_member_grants_roles_and_opens_the_user_admin(make_user):
    """The admin role had a 403 on Django's user pages: only a superuser could grant."""
    admin = make_user("admin", is_staff=True)
    owner = make_user("coordinator")
    client = Client()
    client.force_login(admin)
    assert client.get(f"/admin/auth/user/{owner.pk}/change/").status_code == 200
    response = client.post(
        reverse("recovery:person", args=[owner.pk]),
        {"roles": ["coordinator"], "may_recover": "on", "reason": "owns the failed queue"},
    )
    assert response.status_code == 302
    owner = get_user_model().objects.get(pk=owner.pk)
    assert owner.has_perm("ledger.recover_operation")
    assert client.get(reverse("recovery:queue", args=[]) + "?missing=1").status_code == 200
    assert client.get(reverse("recovery:setup-queue", args=["nope"])).status_code == 404


def test_a_persons_address_is_set_with_a_reason_and_the_journal_keeps_no_address(make_user):
    admin = make_user("admin", is_staff=True)
    casey = make_user("coordinator", username="casey")
    client = Client()
    client.force_login(admin)
    url = reverse("recovery:person", args=[casey.pk])
    assert 'name="email"' in client.get(url).content.decode()

    refused = client.post(url, {"roles": ["coordinator"], "email": "casey@council.example"})
    assert refused.status_code == 400  # no reason, nothing saved
    assert get_user_model().objects.get(pk=casey.pk).email == ""

    saved = client.post(
        url,
        {"roles": ["coordinator"], "email": "Casey.Jones@Council.Example", "reason": "new starter"},
    )
    assert saved.status_code == 302
    assert get_user_model().objects.get(pk=casey.pk).email == "Casey.Jones@council.example"
    client.post(url, {"roles": ["coordinator"], "email": "cj@council.example", "reason": "renamed"})
    client.post(url, {"roles": ["coordinator"], "email": "", "reason": "left the team"})
    assert get_user_model().objects.get(pk=casey.pk).email == ""

    rows = JournalEntry.objects.filter(action="recovery.person.email_changed").order_by("id")
    assert [r.evidence["email"] for r in rows] == [
        {"from": "", "to": "an address"},
        {"from": "an address", "to": "a new address"},
        {"from": "an address", "to": ""},
    ]
    everything = " ".join(
        f"{r.reason} {r.evidence} {r.subject_id}" for r in JournalEntry.objects.all()
    ).lower()
    assert "council.example" not in everything and "casey.jones" not in everything
    page = client.get(url).content.decode()
    assert "E-mail address</strong>: (none) → an address" in page
    assert "cj@council.example" not in page.split("Changes made here")[1]


@pytest.mark.parametrize(
    "value",
    [
        "not an address",
        "casey@",
        "a" * 250 + "@council.example",
        "casey\x00@council.example",
        "cas%ED%A0%80ey@council.example",  # a lone surrogate, as UTF-8 bytes
        "casey@" + "\u0130" * 60 + ".example",  # grows when lowercased, past a label's length
        "casey@xn--.example",
        "casey@council.example\r\nBcc: everyone@council.example",
    ],
)
def test_a_bad_address_is_refused_on_the_form_never_a_500(make_user, value):
    admin = make_user("admin", is_staff=True)
    casey = make_user("coordinator", username="casey", email="casey@council.example")
    client = Client()
    client.force_login(admin)
    body = "roles=coordinator&reason=typo&email=" + quote(value, safe="%@")
    response = client.post(
        reverse("recovery:person", args=[casey.pk]),
        body,
        content_type="application/x-www-form-urlencoded",
    )
    assert response.status_code == 400
    assert get_user_model().objects.get(pk=casey.pk).email == "casey@council.example"
    assert not JournalEntry.objects.filter(action="recovery.person.email_changed").exists()


def test_an_international_domain_is_kept_as_written_and_sent_as_the_relay_reads_it(make_user):
    admin = make_user("admin", is_staff=True)
    casey = make_user("coordinator", username="casey")
    client = Client()
    client.force_login(admin)
    response = client.post(
        reverse("recovery:person", args=[casey.pk]),
        {"roles": ["coordinator"], "email": "casey@B\u00fccher.example", "reason": "new starter"},
    )
    assert response.status_code == 302
    assert get_user_model().objects.get(pk=casey.pk).email == "casey@b\u00fccher.example"


def test_the_people_page_shows_each_address_or_that_there_is_none(make_user):
    admin = make_user("admin", is_staff=True)
    make_user("coordinator", username="casey", email="casey@council.example")
    make_user("reviewer", username="robin")
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("recovery:people")).content.decode()
    assert "casey@council.example" in page
    assert "nothing can tell them what needs them" in page


@pytest.mark.parametrize(
    ("keywords", "words"),
    [
        ("\n".join(f"w{i}" for i in range(201)), "At most 200 keywords (there are 201)."),
        ("x" * 101, "Each keyword at most 100 characters"),
    ],
)
def test_a_category_form_refuses_keywords_past_the_caps(root, keywords, words):
    response = root.post(
        reverse("recovery:setup-category-new"),
        {"slug": "waste", "name": "Waste", "keywords": keywords, "reason": "set up"},
    )
    assert response.status_code == 400
    assert words in response.content.decode()
    from intake.models import Category

    assert not Category.objects.exists()


def test_an_integration_without_an_owner_is_named(root, superuser):
    found = {f.id: f for f in findings()}
    assert "Nobody owns these integrations" in str(found["handover.W107"].text)
    assert "CRM" in str(found["handover.W107"].text)
    Integration.objects.update(owner=superuser)
    assert "handover.W107" not in [f.id for f in findings()]


def test_a_person_with_a_role_and_no_address_is_named(root, make_user):
    assert "handover.W108" not in [f.id for f in findings()]
    person = make_user("coordinator", username="no-address")
    get_user_model().objects.filter(pk=person.pk).update(email="")
    found = {f.id: f for f in findings()}
    assert "no-address" in str(found["handover.W108"].text)
    assert "handover.W108" in checks()
    get_user_model().objects.filter(pk=person.pk).update(email="casey@example.org")
    assert "handover.W108" not in [f.id for f in findings()]


def test_no_categories_is_named_and_one_active_category_clears_it(root):
    from intake.models import Category

    assert "handover.W109" in [f.id for f in findings()]
    assert "There are no categories" in root.get(reverse("recovery:queue")).content.decode()
    Category.objects.create(slug="waste", name="Bins and waste", active=False)
    assert "handover.W109" in [f.id for f in findings()]
    Category.objects.filter(slug="waste").update(active=True)
    assert "handover.W109" not in [f.id for f in findings()]
