"""``manage.py provision FILE``: the example file sets a fresh install up, journalled, and a
second run changes nothing; a bad file writes nothing and says where it is wrong."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from intake.models import Category
from ledger.models import Integration, JournalEntry
from recovery.models import Queue, ResponsePolicy
from recovery.readiness import findings

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "provision.toml"


def provision(*args):
    out = io.StringIO()
    try:
        call_command("provision", *args, stdout=out)
    except SystemExit as exit_:
        return exit_.code, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def fresh(db, roles):
    return get_user_model().objects.create_superuser("root", "", "pw-only-tests")


def test_the_example_sets_a_fresh_install_up_and_a_second_run_changes_nothing(fresh):
    code, out = provision(str(EXAMPLE))

    assert code == 0, out
    users = {u.username: u for u in get_user_model().objects.all()}
    assert set(users) == {"root", "alex", "robin", "casey"}
    assert users["alex"].is_staff and users["alex"].groups.filter(name="admin").exists()
    assert not users["alex"].has_usable_password()
    assert users["casey"].has_perm("ledger.recover_operation")
    assert set(Category.objects.values_list("slug", flat=True)) == {"waste", "repairs", "website"}
    assert ResponsePolicy.objects.count() == 1 + len(Queue.values)
    assert ResponsePolicy.objects.get(queue="unknown").owner == users["casey"]
    assert Integration.objects.get(name="crm").owner == users["alex"]
    # Every queue owned, a reviewer and an admin: only the integration checks and e-mail left.
    assert {f.id for f in findings()} == {"handover.W103", "handover.W104"}

    journalled = JournalEntry.objects.filter(reason="Go-live set-up, change ticket CHG-0001")
    assert journalled.count() > 0
    assert set(journalled.values_list("actor", flat=True)) == {"system:provision"}
    count = JournalEntry.objects.count()

    code, out = provision(str(EXAMPLE))
    assert code == 0 and "Nothing to change" in out
    assert JournalEntry.objects.count() == count


def test_check_says_what_would_change_and_changes_nothing(fresh):
    code, out = provision(str(EXAMPLE), "--check")
    assert code == 1
    assert "would change: queue unknown" in out
    assert get_user_model().objects.count() == 1
    assert not ResponsePolicy.objects.exists() and not JournalEntry.objects.exists()

    provision(str(EXAMPLE))
    assert provision(str(EXAMPLE), "--check")[0] == 0


def test_as_a_named_person_the_journal_names_them(fresh, make_user):
    admin = make_user("admin", username="alex", is_staff=True)
    provision(str(EXAMPLE), "--as", "alex")
    actors = set(JournalEntry.objects.values_list("actor", flat=True))
    assert actors == {"user:alex"}, actors
    assert JournalEntry.objects.filter(actor_user=admin).exists()


def test_a_person_without_the_permissions_cannot_provision(fresh, make_user):
    make_user("coordinator", username="casey")
    with pytest.raises(CommandError, match="may not"):
        provision(str(EXAMPLE), "--as", "casey")
    assert not ResponsePolicy.objects.exists()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('reason = ""', "reason: every change is journalled"),
        (
            'reason = "x"\n[queues.failed]\nresponse_period = "soon"',
            "queues.failed.response_period",
        ),
        ('reason = "x"\n[queues.nope]\nowner = "root"', "queues.nope: no such queue"),
        (
            'reason = "x"\n[queues.failed]\nowner = "ghost"',
            "queues.failed.owner: no person 'ghost'",
        ),
        ('reason = "x"\n[people.a]\nroles = ["boss"]', "people.a.roles"),
        ('reason = "x"\n[people.a]\npassword = "hunter2"', "people.a.password: not known here"),
        ('reason = "x"\n[categories.new]\nactive = true', "a new category needs a name"),
        ('reason = "x"\nreason = "y"', "not TOML"),
        ('reason = "x"\n[integrations.fax]\nowner = "root"', "integrations.fax"),
    ],
)
def test_a_bad_file_writes_nothing_and_says_where(fresh, tmp_path, text, words):
    path = tmp_path / "bad.toml"
    path.write_text(f'{text}\n[people.newcomer]\nroles = ["reviewer"]\n')
    with pytest.raises(CommandError) as refused:
        provision(str(path))
    assert words in str(refused.value)
    assert not get_user_model().objects.filter(username="newcomer").exists()
    assert not JournalEntry.objects.exists()
