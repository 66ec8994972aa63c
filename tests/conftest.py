import os
import sys
import uuid

import pytest
from hypothesis import settings as hypothesis_settings

from harness.processes import wait_until

# Property tests: 100 examples each by default, 1,000 under CI (CI=true, as .ci/run sets);
# HYPOTHESIS_PROFILE names either. A test whose example is dear takes a share of the profile's
# count (``hypothesis_settings.default.max_examples // 10``), never a number of its own. No
# deadline: a busy machine makes an example slow, not wrong.
hypothesis_settings.register_profile("default", max_examples=100, deadline=None)
hypothesis_settings.register_profile("ci", max_examples=1000, deadline=None)
hypothesis_settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE")
    or ("ci" if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes") else "default")
)


def pytest_sessionstart(session):
    """With DATABASE_URL unset, the embedded PostgreSQL is started here, before any test runs
    (config/embedded/base.py starts it on a process's first connection, which would otherwise
    fall inside the first test and count as that test starting a process)."""
    from django.db import connections

    find_server = getattr(connections["default"], "find_server", None)
    if find_server is not None:
        find_server()


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


# -- the fast tier: `pytest -m "not slow"` (make test-fast) starts no process -------------------

# Every fixture that starts a process (or stands for one: a module's shared process). A test that
# asks for one, directly or through another fixture, is marked ``slow`` at collection.
PROCESS_FIXTURES = frozenset(
    {
        "sandbox_process",  # the sandbox (harness/sandbox_process.py)
        "proxy_process",  # harness.faultproxy in front of a sandbox or BottleCRM
        "calendar_proxy_process",
        "mail_server",  # harness.mailserver, the SMTP relay
        "radicale_process",  # harness.radicale, CalDAV
        "dav",  # harness.webdav (tests/ledger/test_webdav.py)
        "start_cluster",  # manage.py qcluster
        "web_server",  # gunicorn as `make run` serves (harness.drill.processes.WebServer)
        "start_web",  # tests/security/test_slow_clients.py
        "chromium",  # Playwright's driver and a headless Chromium
        "bottlecrm",
        "bottlecrm_without_custom_field",
        "child_process",  # ledger.budget's child: a PDF's text is read in one (ledger.extraction)
    }
)
BOTTLECRM_FIXTURES = frozenset({"bottlecrm", "bottlecrm_without_custom_field"})


def pytest_collection_modifyitems(items):
    for item in items:
        used = set(item.fixturenames)
        if PROCESS_FIXTURES & used:
            item.add_marker(pytest.mark.slow)
        # A test that asks for a BottleCRM: `-m "not bottlecrm"` leaves it out.
        if BOTTLECRM_FIXTURES & used:
            item.add_marker(pytest.mark.bottlecrm)


@pytest.fixture
def child_process():
    """Asked for by a test that forks ledger.budget's child (reading a PDF does): marks it slow."""


class StartedAProcess(Exception):
    """A test not marked ``slow`` started a process."""


# Audit events (docs.python.org, "Audit events table") raised before a child process exists.
_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"}
)
_fast_test: list[str] = []  # the node id of the running test when it is not slow


def _refuse_processes_in_fast_tests(event, args):
    if _fast_test and event in _PROCESS_EVENTS:
        raise StartedAProcess(
            f"{_fast_test[0]} is not marked slow and started a process ({event}: {args[:2]!r}). "
            "Use a fixture named in tests/conftest.py PROCESS_FIXTURES, or mark the test slow."
        )


sys.addaudithook(_refuse_processes_in_fast_tests)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.get_closest_marker("slow") is None:
        _fast_test.append(item.nodeid)
    try:
        return (yield)
    finally:
        _fast_test.clear()
