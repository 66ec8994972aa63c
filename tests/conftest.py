import os

import pytest

from config.waiting import wait_until


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
