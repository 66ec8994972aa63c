"""Slow, stalled and idle clients cannot starve the web server, as `make run` starts it.

Real processes: the web server from runall's own command (``python -m config.serve``, on this
test's database) and raw sockets. Eight clients declare a 1,000-byte body and send 10 bytes;
eight more send half a request line and stop. Meanwhile /healthz must keep answering, and the
server must close the stalled connections itself once they have been silent for
WEB_CHANNEL_TIMEOUT (2 s here).

Then many idle connections (one byte each), from one client address or from many (the whole of
127.0.0.0/8 is this machine, so each socket can come from its own address while /healthz is
asked from 127.0.0.1): the server closes those over the per-address bound, sheds the longest
idle ones before its connection limit, and /healthz answers while they are held open. There the
idle timeout is longer than the bound on each answer, so an answer cannot come from the idle
timeout making room. The bounds only turn a hang into a failure; nothing is timed.
"""

import os
import select
import signal
import socket
import subprocess

import pytest
import requests

from harness.processes import free_port, web_command
from tests.conftest import wait_for_condition
from tests.ledger.conftest import PROJECT_ROOT, child_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STALLED_BODIES = 8
STALLED_HEADERS = 8
HEALTH_CHECKS = 10
# Liveness bounds, generous on a busy 2-core machine: an answer within them is "answered".
ANSWER_WITHIN_S = 10
CLOSED_WITHIN_S = 60
# The idle timeout in the idle-connection tests: longer than any wait below.
LONG_CHANNEL_TIMEOUT = "300"


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
            web_command(f"127.0.0.1:{port}", "--access-log"),
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


def _idle(port, source: str) -> socket.socket:
    """A connection from ``source`` that sends one byte of a request and then nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(CLOSED_WITHIN_S)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"G")
    return sock


def _closed_now(sock) -> bool:
    """Has the server closed it? Without waiting: the server sends nothing else to these."""
    # poll, not select: with a thousand sockets open (and whatever else the test process holds)
    # their numbers pass select()'s limit of 1024.
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    if not poller.poll(0):
        return False
    try:
        return sock.recv(1) == b""
    except OSError:  # reset: closed with our byte unread
        return True


def _healthz_answers(url, times=3):
    with requests.Session() as session:
        session.trust_env = False
        for _ in range(times):
            # Within the idle timeout: an answer means the server made room by itself.
            response = session.get(url + "/healthz", timeout=CLOSED_WITHIN_S)
            assert response.status_code == 200, response.text


def _closed_by_server_soon(socks, at_least):
    assert socks
    closed = set()

    def enough():
        closed.update(i for i, sock in enumerate(socks) if i not in closed and _closed_now(sock))
        return len(closed) >= at_least

    wait_for_condition(
        enough, timeout=CLOSED_WITHIN_S, interval=0.2, message=f"{at_least} closed by the server"
    )
    return closed


def test_one_address_keeps_at_most_its_bound_of_connections(start_web):
    port, url = start_web(
        WEB_PROCESSES="1",
        WEB_CONNECTIONS_PER_CLIENT="10",
        WEB_CHANNEL_TIMEOUT=LONG_CHANNEL_TIMEOUT,
    )
    idle = [_idle(port, "127.0.0.2") for _ in range(30)]
    try:
        closed = _closed_by_server_soon(idle, at_least=20)
        _healthz_answers(url)  # from 127.0.0.1: another address, not bound by 127.0.0.2's

        still_open = [i for i, sock in enumerate(idle) if i not in closed and not _closed_now(sock)]
        assert len(still_open) == 10, still_open
    finally:
        for sock in idle:
            sock.close()


def test_idle_connections_are_shed_before_the_connection_limit(start_web):
    """60 idle connections from 60 addresses, each within its bound, against a limit of 50:
    from 40 open (80%), each new connection closes the longest idle one, so /healthz is
    accepted and answered instead of waiting in the listen backlog."""
    port, url = start_web(
        WEB_PROCESSES="1",
        WEB_CONNECTION_LIMIT="50",
        WEB_CHANNEL_TIMEOUT=LONG_CHANNEL_TIMEOUT,
    )
    idle = [_idle(port, f"127.0.1.{n}") for n in range(1, 61)]
    try:
        _healthz_answers(url)
        closed = _closed_by_server_soon(idle, at_least=20)

        assert 0 in closed, "the longest idle connection was kept"
        assert len(idle) - 1 not in closed, "the newest connection was shed before older ones"
    finally:
        for sock in idle:
            sock.close()


def test_a_thousand_idle_connections_from_one_client_do_not_stop_the_server(start_web):
    """The attack as it was found: about 1,000 connections from one client, one byte each,
    against the server as `make run` starts it (2 processes x 500 connections)."""
    port, url = start_web(WEB_CHANNEL_TIMEOUT=LONG_CHANNEL_TIMEOUT)
    _healthz_answers(url, times=1)
    idle = [_idle(port, "127.0.0.2") for _ in range(1000)]
    try:
        _healthz_answers(url, times=5)
        # At most 100 per process (WEB_CONNECTIONS_PER_CLIENT) stay open.
        _closed_by_server_soon(idle, at_least=800)
    finally:
        for sock in idle:
            sock.close()
