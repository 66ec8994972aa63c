"""Fifty copies of one signed event at the same moment, over real HTTP: one event, one enquiry."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.core.handlers.wsgi import WSGIHandler
from django.db import connections
from waitress.server import create_server

from intake.models import Enquiry, IntakeEvent, Revision
from ledger.models import JournalEntry
from tests.intake.conftest import SECRET, fixture_bytes
from tests.intake.signing import signed_headers

COPIES = 50
# Threads in the server, each with its own database connection. The embedded PostgreSQL is shared
# by parallel test runs (max_connections 100), so the server serves the 50 connections with 16
# workers at a time; the rest queue in waitress, as behind any real server. Every one of the 16
# still races the others on the unique index.
SERVER_THREADS = 16


class ClosingApp:
    """Django's WSGI app, closing the thread's connection after each request (test teardown
    drops the database, which PostgreSQL refuses while a connection is open)."""

    def __init__(self):
        self.app = WSGIHandler()

    def __call__(self, environ, start_response):
        try:
            return list(self.app(environ, start_response))
        finally:
            connections.close_all()


@pytest.fixture
def http_server():
    server = create_server(ClosingApp(), host="127.0.0.1", port=0, threads=SERVER_THREADS)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        server.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the test server did not stop within 10s"


@pytest.mark.django_db(transaction=True)
def test_fifty_simultaneous_copies_make_one_event_and_one_enquiry(http_server):
    body = fixture_bytes("website_enquiry.json")
    headers = {
        **signed_headers(body, SECRET, msg_id="msg_fifty_at_once"),
        "Content-Type": "application/json",
    }
    url = f"{http_server}/intake/events/website/"
    start = threading.Barrier(COPIES, timeout=30)

    def deliver(_):
        with requests.Session() as session:
            session.trust_env = False
            start.wait()  # every thread sends at the same moment
            response = session.post(url, data=body, headers=headers, timeout=60)
            return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=COPIES) as pool:
        answers = list(pool.map(deliver, range(COPIES)))

    statuses = sorted(status for status, _ in answers)
    assert set(statuses) <= {200, 202}, statuses
    assert statuses.count(202) == 1, statuses
    assert len({body["reference"] for _, body in answers}) == 1
    assert IntakeEvent.objects.count() == 1
    assert Enquiry.objects.count() == 1
    assert Revision.objects.count() == 1
    assert IntakeEvent.objects.get().deliveries == COPIES
    # One transition (received -> validated), one journal row; the losers left nothing behind.
    assert JournalEntry.objects.filter(to_state="validated").count() == 1
