"""Fixtures for the sandbox's own tests: one sandbox process per test module, reset (no
records, faults, counts or changed capabilities) before each test."""

import functools

import pytest
import requests

from harness.sandbox_process import SandboxProcess
from tests.conftest import wait_for_condition


@pytest.fixture(scope="module")
def sandbox_process(tmp_path_factory):
    with SandboxProcess() as process:
        process.start(tmp_path_factory.mktemp("sandbox") / "sandbox.sqlite3")
        yield process


@pytest.fixture
def sandbox(sandbox_process):
    """A running sandbox on a free port with nothing in it: the module's process (started
    again if a test stopped or killed it), reset."""
    if not sandbox_process.running:
        sandbox_process.restart()
    sandbox_process.reset()
    return sandbox_process


class Api:
    """`requests` calls against one sandbox, sending its bearer token when it has one."""

    def __init__(self, session: requests.Session, sandbox: SandboxProcess) -> None:
        self.session = session
        self.sandbox = sandbox

    def request(self, method: str, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("timeout", 10)
        headers = {**self.sandbox.auth_headers, **kwargs.pop("headers", {})}
        return self.session.request(method, self.sandbox.url + path, headers=headers, **kwargs)

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> requests.Response:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs) -> requests.Response:
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str, **kwargs) -> requests.Response:
        return self.request("DELETE", path, **kwargs)


@pytest.fixture
def api(sandbox):
    with requests.Session() as session:
        session.trust_env = False  # local calls never go through an environment proxy
        yield Api(session, sandbox)


@pytest.fixture
def poll():
    """poll(predicate): wait up to 10 s for it to become truthy."""
    return functools.partial(wait_for_condition, timeout=10.0)
