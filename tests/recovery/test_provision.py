"""``manage.py provision FILE``: the example file sets a fresh install up, journalled, and a
second run changes nothing; a bad file writes nothing and says where it is wrong."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# --- hostile files: each a message naming the key, never a traceback ---------------------------

HOSTILE = {
    "a NUL in a username": ('[people."a\\u0000b"]\nroles = []', 'people."a\\u0000b": remove'),
    "a NUL in a name": ('[categories.a]\nname = "x\\u0000"', "categories.a.name: remove"),
    "a NUL in a keyword": (
        '[categories.a]\nname = "x"\nkeywords = ["a\\u0000"]',
        "categories.a.keywords[0]: remove the control character U+0000",
    ),
    "a NUL in the reason": ('reason = "x\\u0000"', "reason: remove the control character"),
    "a line break in an owner": ('[queues.failed]\nowner = "a\\nb"', "queues.failed.owner: remove"),
    "a username of 300 characters": (
        "[people." + "a" * 300 + "]\nroles = []",
        "at most 150 characters (it has 300)",
    ),
    "a username with a space": (
        '[people."a b"]\nroles = []',
        'people."a b": Enter a valid username',
    ),
    "an e-mail of 300 characters": (
        '[people.a]\nemail = "' + "a" * 300 + '@x.org"',
        "people.a.email: Ensure this value has at most 254 characters",
    ),
    "a slug with a space": ('[categories."a b"]\nname = "x"', 'categories."a b": Enter a valid'),
    "a name of 300 characters": (
        '[categories.a]\nname = "' + "x" * 300 + '"',
        "categories.a.name: Ensure this value has at most 120 characters",
    ),
    "a number of 5,000 digits": ("[people.a]\nactive = " + "9" * 5000, "a value cannot be read"),
    "arrays nested 5,000 deep": ("q = " + "[" * 5000 + "]" * 5000, "nested too deeply"),
    "a response period of no time": (
        '[queues.failed]\nresponse_period = "0 s"',
        "queues.failed.response_period: between 1 min and 90 d",
    ),
    "a date where text goes": ("[people.a]\nemail = 1979-05-27", "people.a.email: expected str"),
    "an unknown key": ('[categories.a]\nname = "x"\ncolour = "red"', "categories.a.colour"),
}


@pytest.mark.parametrize(("text", "words"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_file_is_a_message_naming_the_key_and_writes_nothing(
    fresh, tmp_path, text, words
):
    path = tmp_path / "hostile.toml"
    head = "" if text.startswith("reason") else 'reason = "x"\n'
    path.write_text(f'{head}{text}\n[people.newcomer]\nroles = ["reviewer"]\n', encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        provision(str(path))
    assert words in str(refused.value)
    assert not get_user_model().objects.filter(username="newcomer").exists()
    assert not JournalEntry.objects.exists()


def test_a_file_that_is_not_utf8_is_a_message(fresh, tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'reason = "caf\xe9"\n')
    with pytest.raises(CommandError, match="cannot read it"):
        provision(str(path))


@pytest.mark.parametrize("field", ["owner", "backup_owner"])
def test_a_queue_owner_needs_a_console_role(fresh, tmp_path, field):
    path = tmp_path / "owner.toml"
    path.write_text(
        f'reason = "x"\n[people.nobody]\nroles = []\n[queues.failed]\n{field} = "nobody"\n'
    )
    with pytest.raises(CommandError) as refused:
        provision(str(path))
    assert f"queues.failed.{field}: 'nobody' has no console role" in str(refused.value)
    assert not ResponsePolicy.objects.filter(queue="failed").exists()
    assert not get_user_model().objects.filter(username="nobody").exists()


def test_a_superuser_without_a_role_owns_no_queue_or_integration(fresh, tmp_path):
    for text, where in (
        ('[queues.failed]\nowner = "root"', "queues.failed.owner"),
        ('[integrations.crm]\nowner = "root"', "integrations.crm.owner"),
    ):
        path = tmp_path / "root.toml"
        path.write_text(f'reason = "x"\n{text}\n')
        with pytest.raises(CommandError, match=f"{where}: 'root' has no console role"):
            provision(str(path))


def test_a_queue_owner_given_a_role_in_the_same_file_is_taken(fresh, tmp_path):
    path = tmp_path / "owner.toml"
    path.write_text(
        'reason = "x"\n[people.casey]\nroles = ["coordinator"]\n[queues.failed]\nowner = "casey"\n'
    )
    assert provision(str(path))[0] == 0
    assert ResponsePolicy.objects.get(queue="failed").owner.username == "casey"


@pytest.mark.parametrize(
    ("keywords", "words"),
    [
        ([f"w{i}" for i in range(300_000)], "At most 200 keywords (there are 300000)"),
        (["x" * 101], "Each keyword at most 100 characters"),
    ],
)
def test_keywords_are_capped_in_count_and_length(fresh, tmp_path, keywords, words):
    path = tmp_path / "keywords.toml"
    listed = ", ".join(f'"{k}"' for k in keywords)
    path.write_text(f'reason = "x"\n[categories.waste]\nname = "Waste"\nkeywords = [{listed}]\n')
    with pytest.raises(CommandError) as refused:
        provision(str(path))
    assert f"categories.waste.keywords: {words}" in str(refused.value)
    assert not Category.objects.exists()


def test_the_most_keywords_allowed_are_taken(fresh, tmp_path):
    from intake.models import KEYWORDS_MAX

    path = tmp_path / "keywords.toml"
    listed = ", ".join(f'"w{i}"' for i in range(KEYWORDS_MAX))
    path.write_text(f'reason = "x"\n[categories.waste]\nname = "Waste"\nkeywords = [{listed}]\n')
    assert provision(str(path))[0] == 0
    assert len(Category.objects.get().keyword_list()) == KEYWORDS_MAX


# --- any file: a message or a run, never a traceback ---------------------------------------------


def _toml(value) -> str:
    """A value written as TOML (JSON's string escapes are TOML's; a lone surrogate's escape is
    not, which TOML refuses: that is a hostile file too)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


SCALAR = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "alex", "admin", "1 h", "0 s", "a\x00b", "waste", "x" * 200]),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.booleans(),
)
VALUE = st.one_of(SCALAR, st.lists(SCALAR, max_size=4))
TABLES = st.sampled_from(["people", "categories", "queues", "integrations", "other"])
KEYS = st.sampled_from(
    [
        "roles",
        "email",
        "active",
        "may_recover",
        "name",
        "keywords",
        "description",
        "owner",
        "backup_owner",
        "response_period",
        "review_cadence",
        "books_appointments",
        "colour",
    ]
)


@st.composite
def files(draw) -> str:
    lines = [f"reason = {_toml(draw(st.sampled_from(['go-live', '', 'x' * 3000])))}"]
    names = st.one_of(st.sampled_from(["alex", "failed", "default", "crm", "waste"]), st.text())
    for _ in range(draw(st.integers(0, 4))):
        head = f"[{draw(TABLES)}.{json.dumps(draw(names))}]"
        body = draw(st.dictionaries(KEYS, VALUE, max_size=4))
        lines += [head, *(f"{key} = {_toml(value)}" for key, value in body.items())]
    return "\n".join(lines) + "\n"


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=files())
def test_any_file_is_a_message_or_a_run_never_a_traceback(fresh, tmp_path, text):
    path = tmp_path / "any.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        provision(str(path))
    except CommandError as refused:
        assert "Traceback" not in str(refused)


@pytest.mark.parametrize("change", ["active = false", "roles = []"])
def test_provisioning_cannot_remove_the_last_admin(fresh, make_user, tmp_path, change):
    make_user("admin", username="alex", is_staff=True)
    path = tmp_path / "last.toml"
    path.write_text(f'reason = "x"\n[people.alex]\n{change}\n')
    with pytest.raises(CommandError, match="alex is the last active member of the admin role"):
        provision(str(path))
    alex = get_user_model().objects.get(username="alex")
    assert alex.is_active and alex.groups.filter(name="admin").exists()
    assert not JournalEntry.objects.exists()
