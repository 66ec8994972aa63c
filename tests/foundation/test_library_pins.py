"""What the product relies on in a library where the library has no public API for it.

Each of these is said in one line where it is used; the test here fails on an upgrade that
changes it, before the product quietly does something else (as tests/ledger/test_queueing.py
pins django-q2's broker for ledger.queueing.OrmBroker). config.db.handles_lock (pgserver) is
pinned in tests/foundation/test_embedded_database.py.
"""

import inspect
import socket

import pytest
from axes.helpers import get_client_ip_address
from django.test import RequestFactory
from standardwebhooks.webhooks import Webhook
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer, TcpWSGIServer
from waitress.task import ErrorTask

from config.connections import GuardedServer, create_guarded_server
from config.security import client_ip
from intake import signing

SECRETS = [
    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",  # the specification's reference secret
    "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0NTY3",  # unpadded base64
    "whsec_c2Vjb25kLXNvdXJjZS1zZWNyZXQtMDEyMzQ1Njc=",
    "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",  # no prefix
]


@pytest.mark.parametrize("secret", SECRETS)
def test_the_secrets_key_is_the_one_standardwebhooks_signs_with(secret):
    """intake.signing.secret_key decodes a secret as the package does (it keeps its key in a
    private attribute, read here only to pin that), so a body that is not UTF-8 is signed
    with the same key as any other."""
    assert signing.secret_key(secret) == Webhook(secret)._whsecret
    body = '{"name": "Zoë"}'.encode()
    assert signing.sign_bytes(secret, "msg_1", 1614265330, body) == signing.sign(
        secret, "msg_1", 1614265330, body
    )


def test_a_body_that_is_not_utf8_is_signed_as_bytes():
    body = b"\xff\xfe"
    secret = SECRETS[0]
    assert signing.sign(secret, "msg_1", 1614265330, body) == signing.sign_bytes(
        secret, "msg_1", 1614265330, body
    )


def test_axes_counts_failures_against_the_configured_callable(settings):
    """django-axes asks AXES_CLIENT_IP_CALLABLE first (config.security.client_ip, not its
    ipware settings): behind one trusted proxy, the address the proxy saw, never the one a
    client put in front of it."""
    assert settings.AXES_CLIENT_IP_CALLABLE == "config.security.client_ip"
    settings.TRUSTED_PROXY_COUNT = 1
    request = RequestFactory().post(
        "/accounts/login/",
        HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7",
        REMOTE_ADDR="10.0.0.1",
    )
    assert client_ip(request) == "203.0.113.7"
    assert get_client_ip_address(request) == "203.0.113.7"


def test_what_the_guarded_server_reads_of_waitress_is_there():
    """config.connections subclasses waitress's TcpWSGIServer (no public hook at accept or for
    its timers) and HTTPChannel, and builds the server on a socket bound elsewhere, as
    waitress.create_server does; config.badheaders subclasses its parser and error task."""
    parameters = inspect.signature(TcpWSGIServer.__init__).parameters
    assert {"_sock", "dispatcher", "adj", "sockinfo", "bind_socket"} <= set(parameters)
    server_source = inspect.getsource(BaseWSGIServer)
    assert "active_channels" in server_source
    # Its timers: maintenance(now) every cleanup_interval, from readable(); one accept per
    # handle_accept, None when there is nothing to accept; a channel per accepted pair.
    assert "self.maintenance(now)" in server_source and "cleanup_interval" in server_source
    assert "v = self.accept()" in server_source and "self.channel_class(" in server_source
    channel = inspect.getsource(HTTPChannel)
    for name in ("will_close", "requests", "last_activity", "addr", "request", "total_outbufs_len"):
        assert f"self.{name}" in channel or f"    {name} = " in channel, name
    # received() parses into self.request, hands a completed one on and sets it to None.
    assert "self.request = self.parser_class(self.adj)" in channel
    assert "self.request = None" in channel and "error_task_class" in channel
    parser = inspect.getsource(HTTPRequestParser)
    assert "self.headers_finished = True" in parser
    assert "self.parse_header(header_plus)" in parser and "except ParsingError" in parser
    assert "e = self.request.error" in inspect.getsource(ErrorTask.execute)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        server = create_guarded_server(
            lambda environ, start_response: [], per_client=2, sockets=[sock], threads=1
        )
        try:
            assert isinstance(server, GuardedServer)
            assert server.active_channels == {}
            assert server.socket.getsockname() == sock.getsockname()
            assert server.accept() is None  # nobody is connecting: no pair, no channel
        finally:
            server.task_dispatcher.shutdown()
            server.close()
