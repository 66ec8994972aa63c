"""Slow and stalled clients cannot starve the web server, as `make run` starts it.

Real processes: the web server from runall's own command (``python -m config.serve``, two
processes of four threads, on this test's database) and raw sockets. Eight clients declare a
1,000-byte body and send 10 bytes; eight more send half a request line and stop. Meanwhile
/healthz must keep answering, and the server must close the stalled connections itself once
they have been silent for WEB_CHANNEL_TIMEOUT (2 s here). The bounds below only turn a hang
into a failure; nothing is timed.
"""

import os
import signal
import socket
import subprocess

import pytest
import requests

from ledger.management.commands.runall import web_command
from sandbox.testing import free_port
from tests.conftest import wait_for_condition
from tests.ledger.conftest import PROJECT_ROOT, child_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STALLED_BODIES = 8
STALLED_HEADERS = 8
HEALTH_CHECKS = 10
# Liveness bounds, generous on a busy 2-core machine: an answer within them is "answered".
ANSWER_WITHIN_S = 10
CLOSED_WITHIN_S = 60


@pytest.fixture
def start_web(tmp_path):
    """start_web(**env) -> (port, url): the web server as runall starts it, on this test's
    database, stopped at the end of the test."""
    started = []

    def start(**extra):
        port = free_port()
        env = {
            **os.environ,
            "DATABASE_URL": child_database_url(),
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
        log_path = tmp_path / f"web-{port}.log"
        log = log_path.open("w")
        proc = subprocess.Popen(
            web_command("127.0.0.1", port),
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append((proc, log))
        url = f"http://127.0.0.1:{port}"

        def ready():
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                return requests.get(url + "/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for_condition(ready, timeout=120, interval=0.2, message="the web server to answer")
        return port, url

    yield start
    for proc, log in started:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture
def web(start_web):
    return start_web(WEB_CHANNEL_TIMEOUT="2")


def _stall(port, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=CLOSED_WITHIN_S)
    sock.sendall(data)
    return sock


def _closed_by_server(sock) -> bool:
    """Blocks until the server closes the connection (or sends anything): True if closed."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_stalled_clients_neither_starve_the_server_nor_stay_connected(web):
    port, url = web
    body_head = (
        b"POST /intake/events/website/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"name": "x'
    )
    stalled = [_stall(port, body_head) for _ in range(STALLED_BODIES)]
    stalled += [_stall(port, b"GET /healthz HTT") for _ in range(STALLED_HEADERS)]
    try:
        with requests.Session() as session:
            session.trust_env = False
            for _ in range(HEALTH_CHECKS):
                response = session.get(url + "/healthz", timeout=ANSWER_WITHIN_S)
                assert response.status_code == 200, response.text
                assert response.json()["database"] == "ok"
        closed = [_closed_by_server(sock) for sock in stalled]
        assert all(closed), f"{closed.count(False)} stalled connections were left open"
        # The server is still whole after closing them.
        assert requests.get(url + "/healthz", timeout=ANSWER_WITHIN_S).status_code == 200
    finally:
        for sock in stalled:
            sock.close()


def test_a_tls_proxy_s_forwarded_scheme_reaches_django(start_web):
    """Behind a TLS proxy with SECURE=1: X-Forwarded-Proto reaches Django, which then serves
    the page instead of redirecting it to https (waitress drops such headers unless told)."""
    _port, url = start_web(SECURE="1")
    with requests.Session() as session:
        session.trust_env = False
        plain = session.get(url + "/accounts/login/", allow_redirects=False, timeout=30)
        proxied = session.get(
            url + "/accounts/login/",
            headers={"X-Forwarded-Proto": "https"},
            allow_redirects=False,
            timeout=30,
        )
    assert plain.status_code == 301 and plain.headers["Location"].startswith("https://")
    assert proxied.status_code == 200
