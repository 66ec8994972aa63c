"""The fault proxy in front of a real sandbox: every mode as the caller sees it, as the upstream
sees it (the sandbox's own record and request counts), and as Handover's HTTP wrapper
classifies it."""

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from harness.faultproxy import FaultProxy, FaultProxyError, loopback_host
from harness.processes import free_port
from ledger import http as ledger_http
from ledger.connectors.base import ConnectorError, ErrorKind
from tests.conftest import wait_for_condition
from tests.harness.conftest import TOKEN

pytestmark = pytest.mark.slow  # every test starts or uses real processes

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def create(caller, proxy, reference, timeout=10.0, **kwargs):
    return caller.post(
        proxy.url + "/crm/enquiries", json={"reference": reference}, timeout=timeout, **kwargs
    )


def records(sandbox, reference):
    return sandbox.stats()["crm"]["by_reference"].get(reference, 0)


def creates_received(sandbox):
    """Create calls that reached the sandbox at all, whatever it answered."""
    return sandbox.stats()["requests"].get("crm.create", 0)


def wait_for(predicate, message):
    return wait_for_condition(predicate, timeout=15.0, message=message)


# -- plain forwarding --------------------------------------------------------------------------


def test_a_plain_forward_returns_the_upstreams_own_answer(sandbox, proxy, caller):
    created = caller.post(
        proxy.url + "/crm/enquiries", json={"reference": "R-PLAIN", "name": "Ada"}, timeout=10
    )
    assert created.status_code == 201
    record_id = created.json()["id"]

    direct = caller.get(f"{sandbox.url}/crm/enquiries/{record_id}", timeout=10)
    via = caller.get(f"{proxy.url}/crm/enquiries/{record_id}", timeout=10)
    assert via.status_code == direct.status_code == 200
    assert via.content == direct.content
    assert via.json()["data"] == {"reference": "R-PLAIN", "name": "Ada"}  # the body went as sent
    ignore = {"date", "connection", "keep-alive"}
    assert {k.lower(): v for k, v in via.headers.items() if k.lower() not in ignore} == {
        k.lower(): v for k, v in direct.headers.items() if k.lower() not in ignore
    }
    assert via.headers["X-Sandbox-Pid"] == str(sandbox.pid)  # answered by the upstream

    found = caller.get(proxy.url + "/crm/enquiries", params={"reference": "R-PLAIN"}, timeout=10)
    assert [r["id"] for r in found.json()["results"]] == [record_id]  # the query went too

    assert records(sandbox, "R-PLAIN") == 1
    stats = proxy.stats()
    assert stats["targets"]["crm.create"] == {
        "match": "POST /crm/enquiries",
        "seen": 1,
        "forwarded": 1,
        "upstream_unreachable": 0,
        "upstream_lost": 0,
        "faulted": {},
    }
    assert stats["targets"]["crm.lookup"]["forwarded"] == 1
    assert stats["total"]["seen"] == 3


def test_authorization_goes_to_the_upstream_and_its_refusal_comes_back(sandbox, proxy):
    with requests.Session() as anonymous:
        anonymous.trust_env = False
        refused = create(anonymous, proxy, "R-AUTH")
        accepted = create(anonymous, proxy, "R-AUTH", headers={"Authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 401
    assert refused.json()["error"] == "unauthorized"
    assert refused.headers["X-Sandbox-Pid"] == str(sandbox.pid)  # the sandbox said it
    assert accepted.status_code == 201
    assert records(sandbox, "R-AUTH") == 1


class _Echo(BaseHTTPRequestHandler):
    """Answers with the request it received, and some hop-by-hop headers of its own."""

    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        seen = {
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": self.rfile.read(length).decode(),
        }
        body = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Keep-Alive", "timeout=5")
        self.send_header("Connection", "keep-alive, X-Hop")
        self.send_header("X-Hop", "dropped")
        self.send_header("Set-Cookie", "a=1")
        self.send_header("Set-Cookie", "b=2")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def echo_upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_host_is_rewritten_and_hop_by_hop_headers_stay_on_their_hop(echo_upstream, tmp_path):
    with FaultProxy(echo_upstream + "/base", log_path=tmp_path / "proxy.log") as proxy:
        connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        connection.request(
            "POST",
            "/echo?x=1&y=%20",
            body=iter([b"chunked ", b"body"]),  # no length: sent chunked
            headers={
                "Authorization": "Bearer secret",
                "Connection": "keep-alive, X-Private",
                "X-Private": "for the proxy only",
                "Keep-Alive": "timeout=5",
                "Proxy-Authorization": "Basic eA==",
                "X-Kept": "1",
            },
            encode_chunked=True,
        )
        response = connection.getresponse()
        seen = json.loads(response.read())
        answer_headers = response.getheaders()
        connection.close()

    assert response.status == 200
    headers = {k.lower(): v for k, v in seen["headers"]}
    assert seen["path"] == "/base/echo?x=1&y=%20"
    assert seen["body"] == "chunked body"
    assert headers["host"] == echo_upstream.removeprefix("http://")
    assert headers["authorization"] == "Bearer secret"
    assert headers["x-kept"] == "1"
    assert headers["content-length"] == str(len("chunked body"))
    for dropped in ("x-private", "keep-alive", "proxy-authorization", "transfer-encoding"):
        assert dropped not in headers, dropped
    names = [k.lower() for k, _ in answer_headers]
    assert "x-hop" not in names and "keep-alive" not in names
    assert [v for k, v in answer_headers if k.lower() == "set-cookie"] == ["a=1", "b=2"]


def test_keep_alive_and_connection_close_are_honoured(sandbox, proxy):
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    try:
        connection.request("GET", "/crm/enquiries?reference=R-KA", headers=headers)
        first = connection.getresponse()
        first.read()
        kept = connection.sock
        connection.request("GET", "/crm/enquiries?reference=R-KA", headers=headers)
        second = connection.getresponse()
        second.read()
        assert (first.status, second.status) == (200, 200)
        assert not first.will_close
        assert connection.sock is kept  # the same connection carried both

        connection.request(
            "GET", "/crm/enquiries?reference=R-KA", headers={**headers, "Connection": "close"}
        )
        last = connection.getresponse()
        last.read()
        assert last.status == 200
        assert last.getheader("Connection") == "close"
        assert last.will_close
    finally:
        connection.close()


# -- faults that answer without forwarding -----------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "retry_after", "status", "error", "expected_retry_after"),
    [
        ("error_503", None, 503, "service_unavailable", None),  # an outage, not a throttle
        ("error_503", 7, 503, "service_unavailable", "7"),
        ("error_429", 30, 429, "too_many_requests", "30"),
        ("error_429", "Wed, 21 Oct 2037 07:28:00 GMT", 429, "too_many_requests", None),
        ("error_429", None, 429, "too_many_requests", "1"),
        ("error_401", None, 401, "unauthorized", None),
        ("error_403", None, 403, "forbidden", None),
        ("error_422", None, 422, "unprocessable_entity", None),
    ],
)
def test_error_modes_answer_without_forwarding(
    sandbox, proxy, caller, mode, retry_after, status, error, expected_retry_after
):
    proxy.fault("crm.create", mode, retry_after=retry_after)
    answer = create(caller, proxy, "R-ERR")
    assert answer.status_code == status
    assert answer.json() == {"error": error, "detail": f"fault proxy: {mode}"}
    assert answer.headers["X-Fault-Proxy-Pid"] == str(proxy.pid)
    if isinstance(retry_after, str):
        expected_retry_after = retry_after
    assert answer.headers.get("Retry-After") == expected_retry_after
    assert creates_received(sandbox) == 0  # nothing forwarded
    assert records(sandbox, "R-ERR") == 0
    assert proxy.stats()["targets"]["crm.create"]["faulted"] == {mode: 1}

    assert create(caller, proxy, "R-ERR").status_code == 201  # one call only
    assert records(sandbox, "R-ERR") == 1


# -- faults that drop or withhold --------------------------------------------------------------


def test_reset_before_commit_resets_the_connection_and_nothing_reaches_the_upstream(
    sandbox, proxy, caller
):
    proxy.fault("crm.create", "reset_before_commit")
    with pytest.raises(requests.ConnectionError) as dropped:
        create(caller, proxy, "R-RESET")
    assert "reset" in str(dropped.value).lower()
    assert creates_received(sandbox) == 0
    assert records(sandbox, "R-RESET") == 0
    assert proxy.stats()["targets"]["crm.create"]["forwarded"] == 0
    assert create(caller, proxy, "R-RESET").status_code == 201


def test_drop_after_forward_closes_without_an_answer_after_the_upstream_committed(
    sandbox, proxy, caller
):
    proxy.fault("crm.create", "drop_after_forward")
    with pytest.raises(requests.ConnectionError) as dropped:
        create(caller, proxy, "R-DROP")
    assert "without response" in str(dropped.value)
    # The proxy drops the caller only once the upstream has answered: the record is there now.
    assert records(sandbox, "R-DROP") == 1
    assert creates_received(sandbox) == 1
    target = proxy.stats()["targets"]["crm.create"]
    assert (target["forwarded"], target["faulted"]) == (1, {"drop_after_forward": 1})


def test_hold_keeps_the_answer_past_the_callers_timeout(sandbox, proxy, caller):
    proxy.fault("crm.create", "hold")
    with pytest.raises(requests.ReadTimeout):
        create(caller, proxy, "R-HOLD", timeout=1)
    wait_for(lambda: records(sandbox, "R-HOLD") == 1, "the held create committed upstream")
    wait_for(lambda: proxy.stats()["in_flight"] == 0, "the hold ended when the caller hung up")
    assert creates_received(sandbox) == 1


def test_hold_with_a_delay_closes_on_a_patient_caller_without_an_answer(sandbox, proxy, caller):
    proxy.fault("crm.create", "hold", delay_ms=200)
    with pytest.raises(requests.ConnectionError) as dropped:
        create(caller, proxy, "R-HOLD-D", timeout=30)
    assert "without response" in str(dropped.value)
    assert records(sandbox, "R-HOLD-D") == 1


def test_late_reaches_the_upstream_only_after_the_caller_gave_up(sandbox, proxy, caller):
    proxy.fault("crm.create", "late")  # no delay: held until released
    with pytest.raises(requests.ReadTimeout):
        create(caller, proxy, "R-LATE", timeout=1)
    wait_for(lambda: proxy.stats()["held"] == 1, "the late request held")
    assert creates_received(sandbox) == 0
    assert records(sandbox, "R-LATE") == 0

    assert proxy.release() == 1
    wait_for(lambda: records(sandbox, "R-LATE") == 1, "the late create to arrive")
    wait_for(lambda: proxy.stats()["in_flight"] == 0, "the late request to finish")
    assert proxy.stats()["targets"]["crm.create"]["forwarded"] == 1


def test_late_with_a_delay_arrives_by_itself_after_the_caller_hung_up(sandbox, proxy, caller):
    proxy.fault("crm.create", "late", delay_ms=300)
    with pytest.raises(requests.ReadTimeout):
        create(caller, proxy, "R-LATE-D", timeout=1)
    wait_for(lambda: records(sandbox, "R-LATE-D") == 1, "the late create to arrive")
    assert creates_received(sandbox) == 1


def test_timeout_after_commit_times_the_caller_out_yet_answers_a_patient_one(
    sandbox, proxy, caller
):
    proxy.fault("crm.create", "timeout_after_commit", delay_ms=3000)
    with pytest.raises(requests.ReadTimeout):
        create(caller, proxy, "R-TAC", timeout=1)
    wait_for(lambda: records(sandbox, "R-TAC") == 1, "the create committed upstream")

    proxy.fault("crm.create", "timeout_after_commit", delay_ms=200)
    patient = create(caller, proxy, "R-TAC-2", timeout=30)
    assert patient.status_code == 201
    assert patient.json()["reference"] == "R-TAC-2"


def test_latency_delays_then_answers_normally(sandbox, proxy, caller):
    proxy.fault("crm.create", "latency", delay_ms=100)
    assert create(caller, proxy, "R-LAT").status_code == 201
    assert records(sandbox, "R-LAT") == 1
    assert proxy.stats()["targets"]["crm.create"]["faulted"] == {"latency": 1}


# -- the upstream failing on its own -----------------------------------------------------------


def test_an_unreachable_upstream_is_a_502_because_nothing_was_sent(tmp_path):
    with FaultProxy(f"http://127.0.0.1:{free_port()}", log_path=tmp_path / "p.log") as proxy:
        with pytest.raises(ConnectorError) as caught:
            ledger_http.send("POST", proxy.url + "/crm/enquiries", timeout=5, json_body={})
        assert (caught.value.kind, caught.value.status) == (ErrorKind.TRANSIENT, 502)
        assert "upstream_unreachable" in caught.value.message
        assert proxy.stats()["total"]["upstream_unreachable"] == 1


def test_an_upstream_that_drops_the_request_drops_the_caller_too(sandbox, proxy):
    # The sandbox's own fault: it resets the proxy's connection. The proxy cannot know whether
    # the upstream acted, so it must not answer with a status that says "refused".
    sandbox.fault("crm.create", "reset_before_commit")
    with pytest.raises(ConnectorError) as caught:
        ledger_http.send(
            "POST",
            proxy.url + "/crm/enquiries",
            timeout=5,
            json_body={"reference": "R-UP"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert caught.value.kind is ErrorKind.UNCERTAIN
    assert caught.value.status is None
    assert proxy.stats()["targets"]["crm.create"]["upstream_lost"] == 1


# -- how Handover's HTTP wrapper reads each mode -----------------------------------------------


@pytest.mark.parametrize(
    ("mode", "kind", "status", "upstream_records"),
    [
        ("error_503", ErrorKind.TRANSIENT, 503, 0),
        ("error_429", ErrorKind.TRANSIENT, 429, 0),
        ("error_401", ErrorKind.AUTH, 401, 0),
        ("error_403", ErrorKind.AUTH, 403, 0),
        ("error_422", ErrorKind.INVALID, 422, 0),
        # The caller cannot tell a reset before the upstream from one after it: uncertain,
        # and the reconcile's look-up then finds nothing.
        ("reset_before_commit", ErrorKind.UNCERTAIN, None, 0),
        ("drop_after_forward", ErrorKind.UNCERTAIN, None, 1),
        ("hold", ErrorKind.UNCERTAIN, None, 1),
        ("timeout_after_commit", ErrorKind.UNCERTAIN, None, 1),
        ("late", ErrorKind.UNCERTAIN, None, 0),  # until released, below
    ],
)
def test_handover_classifies_each_mode(sandbox, proxy, mode, kind, status, upstream_records):
    proxy.fault("crm.create", mode)
    with pytest.raises(ConnectorError) as caught:
        ledger_http.send(
            "POST",
            proxy.url + "/crm/enquiries",
            timeout=1.0,
            json_body={"reference": "R-CLASS"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
    assert (caught.value.kind, caught.value.status) == (kind, status)
    wait_for(
        lambda: records(sandbox, "R-CLASS") == upstream_records,
        f"{upstream_records} record(s) upstream",
    )
    if mode == "late":
        proxy.release()
        wait_for(lambda: records(sandbox, "R-CLASS") == 1, "the late create to arrive")


def test_a_plain_forward_through_handovers_wrapper_succeeds(sandbox, proxy):
    result = ledger_http.send(
        "POST",
        proxy.url + "/crm/enquiries",
        timeout=5.0,
        json_body={"reference": "R-OK"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert result.status == 201
    assert result.body["reference"] == "R-OK"
    assert records(sandbox, "R-OK") == 1


# -- targets, counts, order, control API -------------------------------------------------------


def test_a_target_matches_its_method_and_exact_path_a_star_matches_a_prefix(sandbox, proxy, caller):
    record_id = create(caller, proxy, "R-T").json()["id"]
    proxy.fault("POST /crm/enquiries", "error_503", count=3)
    assert caller.get(proxy.url + "/crm/enquiries?reference=R-T", timeout=10).status_code == 200
    close = f"{proxy.url}/crm/enquiries/{record_id}/close"
    assert caller.post(close, json={}, timeout=10).status_code == 200  # not the exact path
    assert proxy.clear_faults() == {"faults_pending": []}

    proxy.fault("crm.close", "error_503")  # named: "POST /crm/enquiries/*"
    assert caller.post(close, json={}, timeout=10).status_code == 503
    proxy.fault("* /crm/*", "error_422")
    assert caller.get(proxy.url + "/crm/enquiries?reference=R-T", timeout=10).status_code == 422

    stats = proxy.stats()["targets"]
    assert stats["crm.close"]["faulted"] == {"error_503": 1}
    assert stats["* /crm/*"]["faulted"] == {"error_422": 1}
    assert stats["crm.lookup"]["faulted"] == {"error_422": 1}
    # A pattern counts from when a fault was first armed on it; from then on a named target
    # and its pattern count the same requests.
    assert (stats["POST /crm/enquiries"]["seen"], stats["crm.create"]["seen"]) == (0, 1)
    create(caller, proxy, "R-T2")
    stats = proxy.stats()["targets"]
    assert (stats["POST /crm/enquiries"]["seen"], stats["crm.create"]["seen"]) == (1, 2)


def test_faults_fire_for_the_next_count_requests_in_the_order_armed(sandbox, proxy, caller):
    proxy.fault("crm.create", "error_503", count=2)
    proxy.fault("POST /crm/enquiries", "error_422")
    pending = proxy.faults()
    assert [(f["target"], f["mode"], f["remaining"]) for f in pending] == [
        ("crm.create", "error_503", 2),
        ("POST /crm/enquiries", "error_422", 1),
    ]
    statuses = [create(caller, proxy, "R-ORDER").status_code for _ in range(4)]
    assert statuses == [503, 503, 422, 201]
    assert proxy.faults() == []
    assert creates_received(sandbox) == 1
    assert proxy.stats()["targets"]["crm.create"]["faulted"] == {"error_422": 1, "error_503": 2}


def test_clear_and_reset(sandbox, proxy, caller):
    proxy.fault("crm.create", "error_503", count=5)
    proxy.clear_faults()
    assert create(caller, proxy, "R-CLEAR").status_code == 201
    assert proxy.stats()["targets"]["crm.create"]["seen"] == 1
    proxy.fault("crm.create", "error_503")
    after = proxy.reset()
    assert after["faults_pending"] == []
    assert after["targets"]["crm.create"]["seen"] == 0
    assert after["total"]["seen"] == 0


@pytest.mark.parametrize(
    "fault",
    [
        {"target": "crm.delete", "mode": "error_503"},
        {"target": "post /crm/enquiries", "mode": "error_503"},
        {"target": "POST crm/enquiries", "mode": "error_503"},
        {"target": "POST /_proxy/faults", "mode": "error_503"},
        {"target": "", "mode": "error_503"},
        {"target": "crm.create", "mode": "explode"},
        {"target": "crm.create", "mode": "fail"},
        {"target": "crm.create", "mode": "error_503", "count": 0},
        {"target": "crm.create", "mode": "error_503", "count": True},
        {"target": "crm.create", "mode": "latency", "delay_ms": -1},
        {"target": "crm.create", "mode": "latency", "delay_ms": "soon"},
        {"target": "crm.create", "mode": "error_503", "delay_ms": 100},
        {"target": "crm.create", "mode": "hold", "retry_after": 5},
        {"target": "crm.create", "mode": "error_429", "retry_after": -1},
        {"target": "crm.create", "mode": "error_429", "retry_after": "1\r\nX-Evil: 1"},
        {"target": "crm.create", "mode": "error_503", "delay": 100},
        ["crm.create", "error_503"],
    ],
)
def test_invalid_faults_are_refused(proxy, caller, fault):
    answer = caller.post(proxy.url + "/_proxy/faults", json=fault, timeout=10)
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_fault"
    assert answer.json()["detail"]
    assert proxy.faults() == []


def test_the_control_api_refuses_what_it_does_not_know(proxy, caller):
    bad_json = caller.post(proxy.url + "/_proxy/faults", data=b"{not json", timeout=10)
    assert (bad_json.status_code, bad_json.json()["error"]) == (400, "malformed_json")
    unknown = caller.get(proxy.url + "/_proxy/nothing", timeout=10)
    assert (unknown.status_code, unknown.json()["error"]) == (404, "not_found")
    wrong = caller.put(proxy.url + "/_proxy/faults", timeout=10)
    assert wrong.status_code == 405
    assert wrong.headers["Allow"] == "DELETE, GET, POST"
    assert proxy.stats()["total"]["seen"] == 0  # control calls are never counted or forwarded


# -- the process and where it may listen -------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "192.168.0.1", "example.org", ""])
def test_binding_beyond_loopback_is_refused(host):
    with pytest.raises(ValueError, match="loopback"):
        loopback_host(host)
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("http://127.0.0.1:1", host=host)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_addresses_are_accepted(host):
    assert loopback_host(host) in {host, "127.0.0.1"}


def test_the_command_refuses_a_public_bind_before_listening():
    port = free_port()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.faultproxy",
            "--upstream",
            "http://127.0.0.1:1",
            "--host",
            "0.0.0.0",
            "--port",
            str(port),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "loopback" in result.stderr
    assert "listening" not in result.stdout


def test_start_fails_clearly_when_the_port_is_taken(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        proxy = FaultProxy("http://127.0.0.1:1", port=port, log_path=tmp_path / "p.log")
        with pytest.raises(FaultProxyError, match="exited with code 1") as failure:
            proxy.start()
    assert "cannot listen" in str(failure.value)  # the child's own words, quoted
    assert not proxy.running


def test_stopping_with_a_request_held_is_an_orderly_exit(sandbox_process, tmp_path, caller):
    caught = []
    with FaultProxy(sandbox_process.url, log_path=tmp_path / "p.log") as proxy:
        proxy.fault("POST /crm/enquiries", "late")

        def call():
            try:
                create(caller, proxy, "R-STOP", timeout=30)
            except requests.RequestException as exc:
                caught.append(exc)

        waiting = threading.Thread(target=call)
        waiting.start()
        wait_for(lambda: proxy.stats()["held"] == 1, "the request held")
        child = proxy.process
        proxy.stop()
        waiting.join()
    assert child.returncode == 0  # SIGTERM was enough
    assert isinstance(caught[0], requests.ConnectionError)
    assert sandbox_process.stats()["crm"]["by_reference"].get("R-STOP", 0) == 0


def test_a_proxy_whose_starter_dies_stops_by_itself(sandbox_process, tmp_path):
    log_path = tmp_path / "p.log"
    # The starter leaves at once, with no stop() and no clean-up, as a crashed test would.
    code = (
        "import os, sys; from harness.faultproxy import FaultProxy; "
        "p = FaultProxy(sys.argv[1], log_path=sys.argv[2]).start(); "
        "print(p.pid, p.port, flush=True); os._exit(0)"
    )
    started = subprocess.run(
        [sys.executable, "-c", code, sandbox_process.url, str(log_path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pid, port = map(int, started.stdout.split())

    def closed():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return False
        except OSError:
            return True

    try:
        wait_for(closed, "the orphaned proxy to stop listening")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # only if the test failed: it is ours to stop
    assert "is gone: stopping" in log_path.read_text()
