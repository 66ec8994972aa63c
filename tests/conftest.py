import os
import uuid

import pytest

from harness.processes import wait_until


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """One throwaway test database per test run, so parallel runs on one server never meet."""
    from django.conf import settings

    test = settings.DATABASES["default"].setdefault("TEST", {})
    if not os.environ.get("TEST_DATABASE_NAME"):
        test["NAME"] = f"{test.get('NAME') or 'test_handover'}_{os.getpid()}"


@pytest.fixture
def roles(db):
    """The role groups (remade after a flush by post_migrate; this makes the need explicit)."""
    from recovery.roles import ensure_roles

    ensure_roles()


@pytest.fixture
def make_user(db, roles, django_user_model):
    """make_user("coordinator") -> a user in that role group (or none for role=None)."""
    from django.contrib.auth.models import Group

    def make(role=None, username=None, **extra):
        user = django_user_model.objects.create_user(
            username=username or f"{role or 'nobody'}-{django_user_model.objects.count() + 1}",
            password="pw-for-tests-only",
            **extra,
        )
        if role:
            user.groups.add(Group.objects.get(name=role))
        return user

    return make


def wait_for_condition(predicate, *, timeout=30.0, interval=0.05, message="condition"):
    """Poll ``predicate()`` until it is truthy and return it; fail after ``timeout`` seconds."""
    try:
        return wait_until(predicate, timeout=timeout, interval=interval, what=message, error=_Late)
    except _Late as late:
        failure = str(late)
    pytest.fail(failure)


class _Late(Exception):
    pass


@pytest.fixture
def wait_for():
    return wait_for_condition


# -- a real BottleCRM (harness/bottlecrm.py; docs/sandbox.md, "A real BottleCRM for tests") -------


def bottlecrm_unavailable(reason):
    """A prerequisite of BottleCRM is missing: fail under CI (a skipped proof is no proof),
    skip with the reason on a person's machine."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail(f"BottleCRM is required when CI is set. {reason}", pytrace=False)
    pytest.skip(f"no BottleCRM: {reason}")


def _start_bottlecrm(**options):
    from harness.bottlecrm import BottleCrm, PrerequisiteMissing

    crm = BottleCrm(**options)
    try:
        crm.start()
    except PrerequisiteMissing as missing:
        bottlecrm_unavailable(str(missing))
    return crm


@pytest.fixture(scope="session")
def bottlecrm():
    """A real BottleCRM shared by the whole session (its own database, org and token).

    Cases are per org and the org lives as long as the session, so a test isolates itself by
    using references no other test uses (``bottlecrm_reference``) and counts by reference, never
    the org's total. The first run on a machine builds a venv and migrates a template (minutes).
    """
    crm = _start_bottlecrm()
    yield crm
    crm.stop()


@pytest.fixture(scope="session")
def bottlecrm_without_custom_field():
    """A second BottleCRM whose org has no ``external_ref`` custom field (started on demand)."""
    crm = _start_bottlecrm(custom_field=False)
    yield crm
    crm.stop()


@pytest.fixture
def bottlecrm_reference():
    """A reference of this test only, in the shape of Handover's."""
    return f"ENQ-T{uuid.uuid4().hex[:10].upper()}"


def pytest_collection_modifyitems(items):
    # A test that asks for a BottleCRM starts real processes: `-m "not bottlecrm"` leaves it out.
    for item in items:
        if {"bottlecrm", "bottlecrm_without_custom_field"} & set(item.fixturenames):
            item.add_marker(pytest.mark.bottlecrm)
            item.add_marker(pytest.mark.slow)
