import io

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.urls import reverse

from tests.security.conftest import snapshot


def test_healthz_reports_database_and_queue(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["database"] == "ok"
    assert body["queue"] == "ok"


def test_healthz_answers_plain_http_where_everything_else_is_redirected(client, db, settings):
    # SECURE=1 behind a TLS proxy: a load balancer's probe over plain HTTP still gets the health.
    settings.SECURE_SSL_REDIRECT = True
    assert client.get("/healthz").status_code == 200
    redirected = client.get("/accounts/login/")
    assert redirected.status_code == 301
    assert redirected["Location"].startswith("https://")


def test_healthz_refuses_post(client, db):
    before = snapshot()
    response = client.post("/healthz")
    assert response.status_code == 405
    assert response["Allow"] == "GET"
    assert snapshot() == before


def test_console_requires_login(client, db):
    response = client.get("/console/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/console/")


def test_login_page_renders(client, db):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b"Log in" in response.content


def test_roles_exist_with_their_permissions(db):
    from django.contrib.auth.models import Group

    perms = {
        g.name: {f"{p.content_type.app_label}.{p.codename}" for p in g.permissions.all()}
        for g in Group.objects.prefetch_related("permissions__content_type")
    }
    assert set(perms) >= {"coordinator", "reviewer", "admin"}
    assert "intake.approve_revision" in perms["reviewer"]
    assert "intake.approve_revision" not in perms["coordinator"]
    assert "ledger.recover_operation" not in perms["coordinator"]
    assert "ledger.recover_operation" in perms["admin"]


def test_no_missing_migrations(db):
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_seed_demo_creates_a_user_per_role(db, monkeypatch, capsys):
    from django.contrib.auth import authenticate

    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    call_command("seed_demo")
    for name in ("coordinator", "reviewer", "admin"):
        user = authenticate(username=name, password="demo-pass-123")
        assert user is not None and user.groups.filter(name=name).exists()


@pytest.mark.parametrize("user", ["coordinator", "reviewer", "admin"])
def test_each_demo_user_can_log_in(client, db, monkeypatch, user):
    monkeypatch.setenv("DEMO_PASSWORD", "demo-pass-123")
    call_command("seed_demo", stdout=io.StringIO())
    response = client.post(reverse("login"), {"username": user, "password": "demo-pass-123"})
    assert response.status_code == 302
    (session,) = Session.objects.all()  # the login's session row, for that user
    logged_in = get_user_model().objects.get(username=user)
    assert session.get_decoded()["_auth_user_id"] == str(logged_in.pk)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("run", [1, 2])
def test_role_groups_survive_a_transactional_flush(run):
    # The second run starts after the first one's flush emptied auth_group: post_migrate
    # remakes the roles with their permissions.
    from django.contrib.auth.models import Group

    admin = Group.objects.get(name="admin")
    codes = set(admin.permissions.values_list("codename", flat=True))
    assert {"recover_operation", "review_drillrun", "change_responsepolicy"} <= codes
