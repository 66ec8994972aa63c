"""Slow, stalled and idle clients cannot starve the web server, as `make run` starts it.

Real processes: the web server from runall's own command (``python -m config.serve``, on this
test's database) and raw sockets. Eight clients declare a 1,000-byte body and send 10 bytes;
eight more send half a request line and stop. Meanwhile /healthz must keep answering, and the
server must close the stalled connections itself once their header time or body allowance
(2 s here) is up.

Then many connections that send one byte (the whole of 127.0.0.0/8 is this machine, so each
socket can come from its own address while /healthz is asked from 127.0.0.1): the server closes
those over the per-address bound, sheds the ones that have gone longest without delivering a
request before its connection limit, and /healthz answers while they are held open (there the
limits are longer than the bound on each answer, so an answer cannot come from a limit making
room); with a short header time it cuts every one of them. And the opposite: a legitimate
upload that pauses a second between chunks is never the one cut, while another client churns
hundreds of trickling connections from 250 addresses. The bounds only turn a hang into a
failure; nothing is timed (bench/slow_clients.py takes the figures).
"""

import json
import select
import socket
import threading
import time

import pytest
import requests

from tests.conftest import wait_for_condition

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STALLED_BODIES = 8
STALLED_HEADERS = 8
HEALTH_CHECKS = 10
# Liveness bounds, generous on a busy 2-core machine: an answer within them is "answered".
ANSWER_WITHIN_S = 10
CLOSED_WITHIN_S = 60
# The limits in the tests of the per-address bound and the budget: longer than any wait below.
LONG_LIMIT = "300"
LONG_LIMITS = {"WEB_CHANNEL_TIMEOUT": LONG_LIMIT, "WEB_HEADER_TIMEOUT": LONG_LIMIT}


@pytest.fixture
def web(start_web):
    return start_web(WEB_CHANNEL_TIMEOUT="2", WEB_HEADER_TIMEOUT="2", WEB_BODY_TIMEOUT="2")


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
            # Within the limits: an answer means the server made room by itself.
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
        **LONG_LIMITS,
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
    """60 one-byte connections from 60 addresses, each within its bound, against a limit of
    50: from 40 open (80%), each new connection closes the one whose headers have been
    arriving longest, so /healthz is accepted and answered instead of waiting in the listen
    backlog."""
    port, url = start_web(
        WEB_PROCESSES="1",
        WEB_CONNECTION_LIMIT="50",
        **LONG_LIMITS,
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
    port, url = start_web(**LONG_LIMITS)
    _healthz_answers(url, times=1)
    idle = [_idle(port, "127.0.0.2") for _ in range(1000)]
    try:
        _healthz_answers(url, times=5)
        # At most 100 per process (WEB_CONNECTIONS_PER_CLIENT) stay open.
        _closed_by_server_soon(idle, at_least=800)
    finally:
        for sock in idle:
            sock.close()


def test_one_byte_requests_are_cut_at_their_header_time(start_web):
    """1,100 connections from 110 addresses (10 each, within the per-address bound), each
    having sent one byte of a request, against the server as `make run` starts it (2 processes
    x 500 connections): /healthz answers, and the server cuts every one of them once its header
    time is up, however long the kept-alive limit."""
    port, url = start_web(WEB_HEADER_TIMEOUT="3", WEB_CHANNEL_TIMEOUT=LONG_LIMIT)
    _healthz_answers(url, times=1)
    held = [_idle(port, f"127.0.3.{n % 110 + 1}") for n in range(1100)]
    try:
        _healthz_answers(url, times=3)
        _closed_by_server_soon(held, at_least=len(held))
    finally:
        for sock in held:
            sock.close()


class Churner:
    """Holds ``count`` connections from 250 addresses, each trickling a request's headers (a
    byte every quarter second, never finishing them), and opens a new one for each the server
    closes: the attack on a legitimate slow upload."""

    def __init__(self, port: int, count: int):
        self.port, self.count = port, count
        self.stop = threading.Event()
        self.opened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)

    def _connect(self) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind((f"127.0.2.{self.opened % 250 + 1}", 0))
            sock.settimeout(5)
            sock.connect(("127.0.0.1", self.port))
            sock.setblocking(False)
            sock.send(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
        except OSError:
            sock.close()
            return None
        self.opened += 1
        return sock

    def _run(self):
        socks: list[socket.socket] = []
        try:
            while not self.stop.is_set():
                kept = []
                for sock in socks:
                    try:
                        sock.send(b"a")
                        kept.append(sock)
                    except OSError:  # closed by the server: replaced below
                        sock.close()
                socks = kept
                while len(socks) < self.count and not self.stop.is_set():
                    sock = self._connect()
                    if sock is not None:
                        socks.append(sock)
                self.stop.wait(0.25)
        finally:
            for sock in socks:
                sock.close()


def _slow_upload(port: int, body: bytes, headers: dict, chunks: int) -> bytes:
    """POST ``body`` to intake in ``chunks`` pieces a second apart; the answer's status line."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request_head = (
        f"POST /intake/events/website/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{head}\r\n"
    ).encode()
    size = -(-len(body) // chunks)
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    with socket.create_connection(("127.0.0.1", port), timeout=CLOSED_WITHIN_S) as sock:
        sock.sendall(request_head + pieces[0])
        for piece in pieces[1:]:
            time.sleep(1)
            sock.sendall(piece)
        answer = b""
        while b"\r\n" not in answer:
            got = sock.recv(4096)
            if not got:
                break
            answer += got
    return answer.split(b"\r\n", 1)[0]


def test_a_slow_upload_is_not_cut_while_another_client_churns_connections(start_web):
    """A 54 KB signed intake POST in 10 chunks 1 s apart, while 400 trickling connections from
    250 addresses are held and renewed against a budget of 200: the upload is answered 202 and
    stored. Before, it was the longest idle connection in every pause and was shed."""
    from intake.models import IntakeEvent
    from tests.intake.conftest import SECRET
    from tests.intake.signing import signed_headers

    port, _url = start_web(
        WEB_PROCESSES="1",
        WEB_CONNECTION_LIMIT="200",
        INTAKE_SECRETS=json.dumps({"website": [SECRET]}),
    )
    event = {"name": "Sam", "email": "sam@example.org", "message": "x" * 5000, "consent": True}
    body = json.dumps(event).encode()
    body += b" " * (54_000 - len(body))  # JSON's own whitespace: the body is still the event
    headers = signed_headers(body, SECRET, msg_id="msg_slow_upload")

    with Churner(port, count=400) as churner:
        wait_for_condition(
            lambda: churner.opened >= 600, timeout=CLOSED_WITHIN_S, message="the churn to start"
        )
        status = _slow_upload(port, body, headers, chunks=10)
        assert churner.opened > 600  # connections were renewed throughout

    assert status.startswith(b"HTTP/1.1 202"), status
    assert IntakeEvent.objects.filter(source="website", event_id="msg_slow_upload").count() == 1


def test_a_control_character_in_a_webhook_header_gets_the_contract_s_json(start_web):
    """DEL (or another control character) in webhook-id: waitress refuses the header before
    Django sees it; the sender still gets the intake contract's 401 JSON, and nothing is
    stored. An unreadable other header on the intake path is a 400 in JSON; elsewhere,
    waitress's own 400 stands."""
    from intake.models import IntakeEvent
    from intake.services import EVENT_ID_REFUSED

    port, _url = start_web()
    body = b'{"name": "A", "email": "a@example.org", "message": "hi"}'

    def send(path: bytes, header: bytes) -> tuple[bytes, dict, bytes]:
        request = (
            b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n" + header + b"\r\n\r\n" + body
        )
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_WITHIN_S) as sock:
            sock.sendall(request)
            answer = b""
            while True:
                got = sock.recv(65536)
                if not got:
                    break
                answer += got
        head, _, content = answer.partition(b"\r\n\r\n")
        status_line, *lines = head.split(b"\r\n")
        fields = dict(line.lower().split(b": ", 1) for line in lines)
        return status_line.split(b" ")[1], fields, content

    for value in (b"msg_\x7f1", b"msg\x001", b"\x1b[31m"):
        status, fields, content = send(b"/intake/events/website/", b"webhook-id: " + value)
        assert status == b"401", (value, status, content)
        assert fields[b"content-type"] == b"application/json"
        assert json.loads(content) == {"error": EVENT_ID_REFUSED}

    status, fields, content = send(b"/intake/events/website", b"Webhook-Signature: v1,\x7f")
    assert status == b"401", content
    assert json.loads(content)["error"].startswith("Signature refused: the webhook-signature")

    status, fields, content = send(b"/intake/events/website/", b"X-Note: a\x7fb")
    assert status == b"400", content
    assert fields[b"content-type"] == b"application/json"
    assert "control character" in json.loads(content)["error"]

    status, fields, content = send(b"/accounts/login/", b"webhook-id: msg_\x7f1")
    assert status == b"400" and not fields[b"content-type"].endswith(b"json")
    assert IntakeEvent.objects.count() == 0
