"""Log-ins checked at once are bounded, per client address and per process (config/logins.py).

Real processes: the web server as `make run` starts it (one process of four threads here, so
the count is the process's), its password hasher swapped for one that holds its thread a
second as a slow hash would and notes each check (tests/security/counting_login_app.py);
real sockets from loopback addresses. Many log-in POSTs at once: the checks running at once,
read back from the hasher's notes, never exceed the bound; every other POST got the 429 page;
/healthz and a signed intake answered while the checks ran. Nothing is timed.
"""

import concurrent.futures
import http.client
import json
import re
import threading

import pytest

from tests.conftest import wait_for_condition
from tests.security.counting_login_app import HASHERS, most_at_once

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

APP = ("--app", "tests.security.counting_login_app:application")
PASSWORD = "counted-password-1"
ANSWER_WITHIN_S = 60  # a hang guard
TOO_MANY = "Too many sign-ins at once"


@pytest.fixture
def counted(tmp_path, settings, start_web, django_user_model):
    """(port, hash log): the server with the counting hasher, and a user whose password it
    checks."""
    from tests.intake.conftest import SECRET

    settings.PASSWORD_HASHERS = HASHERS
    django_user_model.objects.create_user(username="counted", password=PASSWORD)
    log = tmp_path / "hashes.log"
    log.write_text("")
    port, _url = start_web(
        *APP,
        WEB_PROCESSES="1",
        WEB_THREADS="4",
        LOGIN_CONCURRENCY="2",
        LOGIN_CONCURRENCY_PER_CLIENT="1",
        HANDOVER_TEST_HASH_LOG=str(log),
        INTAKE_SECRETS=json.dumps({"website": [SECRET]}),
    )
    return port, log


def _request(port, method, path, *, source="127.0.0.1", body=b"", headers=None):
    connection = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=ANSWER_WITHIN_S, source_address=(source, 0)
    )
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheaders(), response.read().decode(errors="replace")
    finally:
        connection.close()


def _login_form(port, source):
    """The cookie and form fields for a log-in POST (CSRF token from the page)."""
    _status, headers, page = _request(port, "GET", "/accounts/login/", source=source)
    cookie = next(v for k, v in headers if k.lower() == "set-cookie" and "csrftoken=" in v)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    return cookie.split(";", 1)[0], token


def _flood(port, sources):
    """One log-in POST from each of ``sources``, all at once; their (status, page)."""
    forms = [_login_form(port, source) for source in sources]
    go = threading.Barrier(len(sources))

    def log_in(source, cookie, token):
        body = f"username=counted&password={PASSWORD}&csrfmiddlewaretoken={token}".encode()
        go.wait()
        status, _headers, page = _request(
            port,
            "POST",
            "/accounts/login/",
            source=source,
            body=body,
            headers={
                "Cookie": cookie,
                "Content-Type": "application/x-www-form-urlencoded",
                "Origin": f"http://127.0.0.1:{port}",
                "Referer": f"http://127.0.0.1:{port}/accounts/login/",
            },
        )
        return status, page

    pool = concurrent.futures.ThreadPoolExecutor(len(sources))
    return pool, [
        pool.submit(log_in, source, cookie, token)
        for source, (cookie, token) in zip(sources, forms, strict=True)
    ]


def _others_answer_meanwhile(port, log):
    """Once a password check is running: /healthz and a signed intake are answered."""
    from tests.intake.conftest import SECRET
    from tests.intake.signing import signed_headers

    wait_for_condition(lambda: "+" in log.read_text(), timeout=ANSWER_WITHIN_S)
    status, _headers, _page = _request(port, "GET", "/healthz")
    assert status == 200
    event = {"name": "Meanwhile", "email": "m@example.org", "message": "hi", "consent": True}
    body = json.dumps(event).encode()
    headers = {"Content-Type": "application/json", **signed_headers(body, SECRET)}
    status, _headers, answer = _request(
        port, "POST", "/intake/events/website/", body=body, headers=headers
    )
    assert status == 202, answer


def _outcomes(futures):
    results = [future.result(timeout=ANSWER_WITHIN_S * 2) for future in futures]
    signed_in = sum(status == 302 for status, _page in results)
    refused = sum(status == 429 and TOO_MANY in page for status, page in results)
    assert signed_in + refused == len(results), [status for status, _page in results]
    return signed_in, refused


def test_one_address_checks_one_password_at_a_time(counted):
    port, log = counted
    pool, futures = _flood(port, ["127.0.0.1"] * 12)
    try:
        _others_answer_meanwhile(port, log)
        signed_in, refused = _outcomes(futures)
    finally:
        pool.shutdown(wait=True)
    assert most_at_once(log.read_text()) == 1  # LOGIN_CONCURRENCY_PER_CLIENT
    assert signed_in >= 1 and refused >= 1
    assert log.read_text().count("+") == signed_in  # a refused one never reached the hasher


def test_a_process_checks_at_most_its_bound_from_many_addresses(counted):
    port, log = counted
    pool, futures = _flood(port, [f"127.0.4.{n}" for n in range(1, 13)])
    try:
        _others_answer_meanwhile(port, log)
        signed_in, refused = _outcomes(futures)
    finally:
        pool.shutdown(wait=True)
    assert most_at_once(log.read_text()) <= 2  # LOGIN_CONCURRENCY
    assert signed_in >= 2 and refused >= 1
    assert log.read_text().count("+") == signed_in
