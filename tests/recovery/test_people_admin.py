"""People in Django's admin, through its real views (recovery/people_admin.py), and the People
page's last-admin rule: only a superuser grants superuser or staff; every change to a person's
roles or flags is journalled with a reason; the last admin-role member cannot go."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from ledger.models import JournalEntry

pytestmark = pytest.mark.django_db

CHANGED = "recovery.person.roles"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def change_url(person) -> str:
    return f"/admin/auth/user/{person.pk}/change/"


def form(person, **changes) -> dict:
    """The admin's change form for ``person`` as its page sends it, with ``changes``."""
    person = get_user_model().objects.get(pk=person.pk)
    data = {
        "username": person.username,
        "first_name": person.first_name,
        "last_name": person.last_name,
        "email": person.email,
        "date_joined_0": person.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": person.date_joined.strftime("%H:%M:%S"),
        "groups": [str(g.pk) for g in person.groups.all()],
        "user_permissions": [str(p.pk) for p in person.user_permissions.all()],
    }
    for flag in ("is_active", "is_staff", "is_superuser"):
        if getattr(person, flag):
            data[flag] = "on"
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def group(name) -> str:
    return str(Group.objects.get(name=name).pk)


def rows(person):
    return list(JournalEntry.objects.filter(subject_id=str(person.pk), action=CHANGED))


@pytest.fixture
def admin(make_user):
    return make_user("admin", username="ada-admin", is_staff=True)


@pytest.fixture
def root(db, roles):
    return get_user_model().objects.create_superuser("root", "root@example.org", "pw-only-tests")


def test_an_admin_who_is_not_a_superuser_cannot_make_themselves_one(admin, make_user):
    make_user("admin", username="second-admin", is_staff=True)
    response = signed_in(admin).post(
        change_url(admin), form(admin, is_superuser="on", reason="because")
    )
    assert response.status_code == 302
    admin.refresh_from_db()
    assert not admin.is_superuser
    assert rows(admin) == []  # nothing changed, nothing written


def test_an_admin_who_is_not_a_superuser_cannot_grant_staff(admin, make_user):
    person = make_user("coordinator", username="cora")
    response = signed_in(admin).post(change_url(person), form(person, is_staff="on", reason="x"))
    assert response.status_code == 302
    person.refresh_from_db()
    assert not person.is_staff


def test_a_superuser_grants_superuser_and_it_is_journalled_with_the_reason(root, admin):
    response = signed_in(root).post(
        change_url(admin), form(admin, is_superuser="on", reason="second break-glass account")
    )
    assert response.status_code == 302
    admin.refresh_from_db()
    assert admin.is_superuser
    [row] = rows(admin)
    assert row.reason == "second break-glass account"
    assert row.evidence["is_superuser"] == {"from": False, "to": True}
    assert row.actor == "user:root"


def test_a_change_of_roles_without_a_reason_is_refused_and_changes_nothing(admin, make_user):
    person = make_user("coordinator", username="cora")
    response = signed_in(admin).post(
        change_url(person), form(person, groups=[group("coordinator"), group("reviewer")])
    )
    assert response.status_code == 200
    assert "Give a reason: it is written to the journal." in response.content.decode()
    assert list(person.groups.values_list("name", flat=True)) == ["coordinator"]
    assert rows(person) == []


def test_a_change_of_name_alone_needs_no_reason_and_writes_no_row(admin, make_user):
    person = make_user("coordinator", username="cora")
    response = signed_in(admin).post(change_url(person), form(person, first_name="Cora"))
    assert response.status_code == 302
    assert rows(person) == []


@pytest.mark.parametrize(
    ("changes", "journalled"),
    [
        ({"groups": "reviewer"}, {"groups": {"from": ["coordinator"], "to": ["reviewer"]}}),
        ({"is_active": None}, {"is_active": {"from": True, "to": False}}),
        (
            {"groups": "admin"},
            {
                "groups": {"from": ["coordinator"], "to": ["admin"]},
                "is_staff": {"from": False, "to": True},  # staff follows the admin role
            },
        ),
    ],
)
def test_each_change_of_roles_or_flags_is_one_journal_row(admin, make_user, changes, journalled):
    person = make_user("coordinator", username="cora")
    if "groups" in changes:
        changes["groups"] = [group(changes["groups"])]
    response = signed_in(admin).post(change_url(person), form(person, reason="moved", **changes))
    assert response.status_code == 302
    [row] = rows(person)
    assert row.reason == "moved" and row.actor == f"user:{admin.username}"
    assert {k: v for k, v in row.evidence.items() if k != "username"} == journalled


@pytest.mark.parametrize("changes", [{"groups": []}, {"is_active": None}])
def test_the_last_admin_cannot_be_demoted_or_deactivated_in_the_admin(root, admin, changes):
    response = signed_in(root).post(change_url(admin), form(admin, reason="leaving", **changes))
    assert response.status_code == 200
    assert "is the last active member of the admin role" in response.content.decode()
    admin.refresh_from_db()
    assert admin.is_active and admin.groups.filter(name="admin").exists()
    assert rows(admin) == []


def test_an_admin_can_be_demoted_while_another_remains(admin, make_user):
    other = make_user("admin", username="bea-admin", is_staff=True)
    response = signed_in(admin).post(change_url(other), form(other, groups=[], reason="moved on"))
    assert response.status_code == 302
    other.refresh_from_db()
    assert not other.groups.exists() and not other.is_staff
    [row] = rows(other)
    assert row.evidence["is_staff"] == {"from": True, "to": False}


def test_nobody_deletes_a_person_in_the_admin(root, admin):
    for client in (signed_in(root), signed_in(admin)):
        assert client.post(f"/admin/auth/user/{admin.pk}/delete/", {"post": "yes"}).status_code in (
            403,
        )
    assert get_user_model().objects.filter(pk=admin.pk).exists()


def test_an_admin_who_is_not_a_superuser_cannot_change_a_superusers_account(admin, root):
    client = signed_in(admin)
    assert client.post(change_url(root), form(root, is_active=None, reason="x")).status_code == 403
    password = f"/admin/auth/user/{root.pk}/password/"
    response = client.post(password, {"password1": "n3w-Passw0rd!x", "password2": "n3w-Passw0rd!x"})
    assert response.status_code == 403
    root.refresh_from_db()
    assert root.is_active and root.check_password("pw-only-tests")


def test_the_people_page_refuses_to_demote_the_last_admin(admin):
    response = signed_in(admin).post(
        reverse("recovery:person", args=[admin.pk]), {"roles": ["reviewer"], "reason": "swap"}
    )
    assert response.status_code == 400
    assert "is the last active member of the admin role" in response.content.decode()
    assert admin.groups.filter(name="admin").exists()
    assert rows(admin) == []


def test_a_change_made_in_the_admin_shows_on_the_persons_console_page(root, admin, make_user):
    person = make_user("coordinator", username="cora")
    signed_in(root).post(change_url(person), form(person, is_superuser="on", reason="on call"))
    html = signed_in(admin).get(reverse("recovery:person", args=[person.pk])).content.decode()
    assert "Superuser" in html and "on call" in html


@pytest.mark.django_db(transaction=True)
def test_two_admins_demoting_each_other_at_once_leave_one(make_user):
    """The second demotion waits for the first (the admin group's row is locked) and then sees
    it: one is refused. Without the lock both read two admins and both succeed."""
    import threading

    from django.db import connection, connections, transaction

    from recovery import setup
    from tests.conftest import wait_for_condition

    ada = make_user("admin", username="ada", is_staff=True)
    bea = make_user("admin", username="bea", is_staff=True)
    outcome, second_pid = {}, {}

    def second():
        try:
            with transaction.atomic():
                second_pid["pid"] = connection.cursor().connection.info.backend_pid
                setup.set_roles(bea, actor=bea, reason="swap", roles=[])
            outcome["second"] = "demoted"
        except setup.LastAdmin:
            outcome["second"] = "refused"
        finally:
            connections.close_all()

    def waiting_or_done() -> bool:
        if "second" in outcome:
            return True
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                [second_pid.get("pid", -1)],
            )
            row = cursor.fetchone()
        return bool(row) and row[0] == "Lock"

    with transaction.atomic():
        setup.set_roles(ada, actor=bea, reason="swap", roles=[])  # bea demotes ada
        thread = threading.Thread(target=second)  # while bea is demoted by herself at once
        thread.start()
        wait_for_condition(
            lambda: "pid" in second_pid and waiting_or_done(), message="the second demotion"
        )
    thread.join(timeout=60)
    assert outcome == {"second": "refused"}
    admins = get_user_model().objects.filter(groups__name="admin", is_active=True)
    assert list(admins.values_list("username", flat=True)) == ["bea"]
