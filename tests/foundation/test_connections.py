"""config.connections' limits on a request, in one process: the guarded server on a real
listening socket, real client sockets, its loop turned by hand. The clock is an argument of
the checks (``over_limit(now, wall)``), so no test waits for a limit to pass.
The same limits against the server as `make run` starts it: tests/security/test_slow_clients.py.
"""

import select
import socket
import threading
import time

import pytest

from config.connections import GuardedChannel, create_guarded_server

HEADER_S, BODY_S, RATE = 5, 10, 500


@pytest.fixture
def server():
    release = threading.Event()  # the application holds each request until the test ends

    def application(environ, start_response):
        release.wait(10)
        start_response("200 OK", [("Content-Length", "0")])
        return []

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        guarded = create_guarded_server(
            application,
            per_client=0,
            header_timeout=HEADER_S,
            body_timeout=BODY_S,
            body_min_rate=RATE,
            sockets=[sock],
            threads=1,
            channel_timeout=30,
            connection_limit=10,
        )
        clients = []

        def connect(data: bytes = b"") -> GuardedChannel:
            client = socket.create_connection(sock.getsockname())
            clients.append(client)
            before = set(guarded.active_channels)
            deadline = time.monotonic() + 10  # a hang guard: accepting is immediate
            while set(guarded.active_channels) == before and time.monotonic() < deadline:
                guarded.handle_accept()
            (fileno,) = set(guarded.active_channels) - before
            channel = guarded.active_channels[fileno]
            if data:
                feed(channel, client, data)
            channel.client = client
            return channel

        def feed(channel, client, data: bytes) -> None:
            client.sendall(data)
            got = 0
            while got < len(data):
                assert select.select([channel.socket], [], [], 10)[0], "nothing arrived"
                chunk = channel.recv(65536)
                assert chunk, "closed"
                got += len(chunk)
                channel.received(chunk)

        guarded.connect = connect
        guarded.release = release
        guarded.feed = feed
        try:
            yield guarded
        finally:
            release.set()
            for client in clients:
                client.close()
            for channel in list(guarded.active_channels.values()):
                channel.handle_close()
            guarded.task_dispatcher.shutdown()
            guarded.close()


def _late(seconds: float) -> tuple[float, float]:
    return time.monotonic() + seconds, time.time() + seconds


def test_headers_must_be_complete_within_the_header_time_however_they_trickle(server):
    channel = server.connect(b"G")
    for _ in range(20):  # one byte at a time: never idle, but the time is the request's
        server.feed(channel, channel.client, b"E")
    assert channel.phase() == "headers"
    assert channel.over_limit(*_late(HEADER_S - 1)) is None
    assert channel.over_limit(*_late(HEADER_S + 1)) == "headers"


def test_a_connection_that_sends_nothing_has_the_header_time_too(server):
    channel = server.connect()
    assert channel.over_limit(*_late(HEADER_S + 1)) == "headers"


def test_a_body_at_a_fair_rate_is_given_time_in_proportion(server):
    head = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 60000\r\n\r\n"
    channel = server.connect(head + b"x" * 5400)
    assert channel.phase() == "body"
    allowed = BODY_S + channel.request_bytes / RATE  # about 21 s for 5.4 KB so far
    assert allowed > BODY_S + 10
    assert channel.over_limit(*_late(allowed - 1)) is None
    assert channel.over_limit(*_late(allowed + 1)) == "body"
    # More bytes, more time: the rate is what is measured, not the pauses.
    server.feed(channel, channel.client, b"x" * 5400)
    assert channel.over_limit(*_late(allowed + 1)) is None


def test_a_stalled_body_is_cut_after_its_allowance(server):
    channel = server.connect(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\n{")
    assert channel.over_limit(*_late(BODY_S + 1)) == "body"


def test_a_kept_alive_connection_between_requests_has_the_idle_rule(server):
    channel = server.connect(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
    server.release.set()  # answered by the thread, then sent by the loop
    deadline = time.monotonic() + 10  # a hang guard
    while (channel.requests or channel.total_outbufs_len) and time.monotonic() < deadline:
        channel.handle_write()
        time.sleep(0.01)
    assert channel.phase() == "idle"
    assert channel.over_limit(*_late(HEADER_S + 1)) is None
    assert channel.over_limit(*_late(31)) == "idle"
    # Its next request's header time begins at that request's first byte.
    server.feed(channel, channel.client, b"GET /y HT")
    assert channel.phase() == "headers"
    assert channel.over_limit(*_late(HEADER_S - 1)) is None


def test_a_request_being_served_is_never_cut_nor_shed(server):
    channel = server.connect(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
    assert channel.phase() == "served"
    assert channel.over_limit(*_late(3600)) is None
    assert channel.shed_key(*_late(3600)) is None


def test_the_budget_sheds_the_longest_arriving_headers_never_a_body(server):
    """From 80% of the limit (8 of 10), each new connection closes the open one that has gone
    longest without delivering a request; a body arriving is never chosen."""
    body = server.connect(b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 9000\r\n\r\n{")
    oldest_headers = server.connect(b"GET /x HT")
    others = [server.connect(b"G") for _ in range(6)]
    assert not any(ch.will_close for ch in [body, oldest_headers, *others])

    newcomer = server.connect(b"G")  # the 9th: sheds one

    assert oldest_headers.will_close
    assert not body.will_close and not newcomer.will_close
    assert not any(ch.will_close for ch in others)
    assert body.shed_key(*_late(3600)) is None
