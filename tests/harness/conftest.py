"""Fixtures for the test equipment's own tests: a real sandbox behind a real fault proxy.

- ``sandbox``: the sandbox as a process with a bearer token (one per module, reset per test).
- ``proxy``: a ``FaultProxy`` process in front of it, with the CRM targets named (one per
  module; faults, counters and holds cleared per test).
- ``caller``: a ``requests`` session that sends the sandbox's token.
- ``mail``: the test SMTP relay (harness.mailserver), from tests/ledger/conftest.py.
"""

import pytest
import requests

from harness.faultproxy import FaultProxy
from harness.sandbox_process import SandboxProcess
from tests.ledger.conftest import mail, mail_server  # noqa: F401 (the SMTP relay's fixtures)

TOKEN = "proxy-test-token"
TARGETS = {
    "crm.create": "POST /crm/enquiries",
    "crm.lookup": "GET /crm/enquiries",
    "crm.close": "POST /crm/enquiries/*",
}


@pytest.fixture(scope="module")
def sandbox_process(tmp_path_factory):
    with SandboxProcess() as process:
        process.start(tmp_path_factory.mktemp("sandbox") / "sandbox.sqlite3", token=TOKEN)
        yield process


@pytest.fixture
def sandbox(sandbox_process):
    """A running sandbox with no records and no faults of its own."""
    if not sandbox_process.running:
        sandbox_process.restart()
    sandbox_process.reset()
    return sandbox_process


@pytest.fixture(scope="module")
def proxy_process(sandbox_process, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("proxy") / "proxy.log"
    with FaultProxy(sandbox_process.url, targets=TARGETS, log_path=log_path) as process:
        yield process


@pytest.fixture
def proxy(proxy_process, sandbox):
    """The proxy in front of ``sandbox``: no faults armed, counters at zero."""
    proxy_process.reset()
    yield proxy_process
    # A hold left behind would forward a late request into the next test's sandbox.
    proxy_process.release()


@pytest.fixture
def caller():
    with requests.Session() as session:
        session.trust_env = False  # local calls never go through an environment proxy
        session.headers["Authorization"] = f"Bearer {TOKEN}"
        yield session
