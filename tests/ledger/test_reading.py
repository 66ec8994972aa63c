"""Every answer is read within bounds before anything holds it (ledger.reading through
ledger.http.send), against a real hostile server replaying the corpus in
tests/ledger/fixtures/hostile_answers.json: a gzip bomb, a body without end, a drip, JSON
nested a hundred thousand deep, an encoding not asked for.

Memory is proved by measuring: the read runs in a child process, which reports its peak RSS
(``getrusage``) before and after; the test states the limit. Time is never asserted: a drip
must end as *invalid* "too slow to read", within a generous hang guard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from django.test import override_settings

from ledger import http, reading
from ledger.connectors.base import ConnectorError, ErrorKind
from tests.ledger.hostile import HostileServer, answer, corpus, gzip_of_zeros

ROOT = Path(__file__).resolve().parents[2]
# What a child process's read may add to its peak RSS: the limits are 2 MB (10 MB for a
# document); without them, the gigabyte is held, decoded, and held again as text.
MEMORY_LIMIT_MB = 150
HANG_GUARD_SECONDS = 120
REFUSED = [a for a in corpus() if a["kind"]]


def read(spec, url, *, method="GET", timeout=3.0, **kwargs):
    if spec.get("document"):
        kwargs.setdefault("max_bytes", reading.document_max_bytes())
    return http.send(method, url + "/answer", timeout=timeout, **kwargs)


@pytest.mark.parametrize("spec", REFUSED, ids=[a["name"] for a in REFUSED])
@override_settings(READ_BUDGET_SECONDS=4.0)
def test_a_hostile_answer_to_a_read_is_refused_as_invalid_in_plain_words(spec):
    with HostileServer(spec) as server, pytest.raises(ConnectorError) as caught:
        read(spec, server.url)
    error = caught.value
    assert error.kind is ErrorKind(spec["kind"]), error.message
    assert spec["words"] in error.message
    assert error.unread and spec["words"] in error.unread
    assert len(server.requests) == 1


@override_settings(READ_BUDGET_SECONDS=4.0)
def test_a_write_whose_cut_answer_said_201_may_have_acted():
    """The status line came: the destination did what 201 says. A cut answer is never read as
    a refusal: uncertain, reconciled."""
    spec = {**answer("gzip_bomb"), "status": 201}
    with HostileServer(spec) as server, pytest.raises(ConnectorError) as caught:
        read(spec, server.url, method="POST", json_body={"reference": "ENQ-1"})
    assert caught.value.kind is ErrorKind.UNCERTAIN
    assert caught.value.status == 201
    assert "larger than 2 MB after decompression" in caught.value.message
    assert "the destination answered 201 and may have acted" in caught.value.message


@override_settings(READ_BUDGET_SECONDS=4.0)
def test_a_write_refused_by_its_status_keeps_the_kind_of_that_status():
    spec = {**answer("huge_plain"), "status": 503, "headers": {"Retry-After": "7"}}
    with HostileServer(spec) as server, pytest.raises(ConnectorError) as caught:
        read(spec, server.url, method="POST", json_body={})
    assert (caught.value.kind, caught.value.status) == (ErrorKind.TRANSIENT, 503)
    assert caught.value.retry_after == 7


@override_settings(READ_BUDGET_SECONDS=4.0)
def test_a_write_that_drips_its_headers_may_have_acted():
    spec = answer("drip_headers")
    with HostileServer(spec) as server, pytest.raises(ConnectorError) as caught:
        read(spec, server.url, method="POST", json_body={})
    assert caught.value.kind is ErrorKind.UNCERTAIN
    assert "too slow to read" in caught.value.message


def test_a_small_compressed_answer_is_read_whole():
    body = json.dumps({"id": "C-1", "note": "é" * 5000}).encode()
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    spec = {
        "headers": {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        "body": {"raw": packer.compress(body) + packer.flush()},
    }
    with HostileServer(spec) as server:
        result = read(spec, server.url)
    assert result.body == {"id": "C-1", "note": "é" * 5000}


def test_the_same_answer_one_byte_over_the_limit_is_refused():
    with override_settings(READ_MAX_BYTES=4096):
        spec = {"headers": {"Content-Type": "text/plain"}, "body": {"zeros": 4096}}
        with HostileServer(spec) as server:
            assert len(read(spec, server.url).content) == 4096
        spec = {"headers": {"Content-Type": "text/plain"}, "body": {"zeros": 4097}}
        over = pytest.raises(ConnectorError, match=r"larger than 4 KB \(stopped reading at 4 KB\)")
        with HostileServer(spec) as server, over:
            read(spec, server.url)


def test_json_nested_64_deep_is_read_and_65_is_not():
    for depth, readable in ((64, True), (65, False)):
        spec = {"headers": {"Content-Type": "application/json"}, "body": {"nest": depth}}
        with HostileServer(spec) as server:
            if readable:
                assert read(spec, server.url).status == 200
            else:
                with pytest.raises(ConnectorError, match="nests deeper than 64"):
                    read(spec, server.url)


def test_the_bomb_is_a_gigabyte_of_zeros():
    """The corpus's bomb is what it says (so a test passing against it proves something)."""
    packed = gzip_of_zeros(1 << 30)
    assert len(packed) < 1_100_000
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    total, pending = 0, packed
    while pending:
        total += len(decoder.decompress(pending, 1 << 24))
        pending = decoder.unconsumed_tail
    assert total == 1 << 30 and decoder.eof


CHILD = """
import json, os, resource, sys
import django
django.setup()
from ledger import http, reading
from ledger.errors import ConnectorError
url, document = sys.argv[1], sys.argv[2] == "1"
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    http.send("GET", url + "/answer", timeout=10.0,
              max_bytes=reading.document_max_bytes() if document else None)
    said = {"kind": "read"}
except ConnectorError as exc:
    said = {"kind": exc.kind.value, "message": exc.message}
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({**said, "before_kb": before, "after_kb": after}))
"""


def read_in_a_child(spec) -> dict:
    with HostileServer(spec) as server:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONPATH": str(ROOT),
            "HANDOVER_TESTING": "1",
        }
        done = subprocess.run(
            [sys.executable, "-c", CHILD, server.url, "1" if spec.get("document") else "0"],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=HANG_GUARD_SECONDS,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["gzip_bomb", "gzip_bomb_document", "huge_plain", "huge_plain_document"]
)
def test_a_gigabyte_answer_never_takes_the_reader_past_its_memory_limit(name):
    spec = answer(name)
    gzip_of_zeros(1 << 30)  # made before the server answers
    said = read_in_a_child(spec)
    assert said["kind"] == spec["kind"], said
    assert spec["words"] in said["message"]
    grown_mb = (said["after_kb"] - said["before_kb"]) / 1024
    assert grown_mb < MEMORY_LIMIT_MB, f"the read took the process {grown_mb:.0f} MB higher"


# -- what a bounded read means to an operation -----------------------------------------------

TOKEN = "handover:s3cret-of-the-store"


@pytest.fixture
def point(db):
    """point(name, server, **row): the integration ``name`` sends to ``server``."""
    from ledger.integrations import ensure_integrations
    from ledger.models import Integration

    def at(name, server, **row):
        ensure_integrations()
        values = {
            "base_url": server.url,
            "token": "",
            "timeout_seconds": 3.0,
            "retry_budget": 3,
            "backoff_seconds": 0.0,
            "supports_lookup": True,
            "settle_delay_seconds": 0.0,
            "paused": False,
            **row,
        }
        Integration.objects.filter(name=name).update(**values)
        return Integration.objects.get(name=name)

    return at


@pytest.fixture
def read_document(make_enquiry, run_queue):
    """read_document() -> (operation, document) once the read has an outcome."""
    from intake.models import Document
    from ledger.models import Operation, OperationState
    from ledger.proposals import propose_extraction

    def run(document_id="letter.txt", version="v1"):
        enquiry = make_enquiry()
        document = Document.objects.create(
            enquiry=enquiry, document_id=document_id, version=version
        )
        op, _ = propose_extraction(enquiry, document, reason="test")
        final = (OperationState.CONFIRMED, OperationState.FAILED, OperationState.UNKNOWN)
        run_queue(until=lambda: Operation.objects.get(pk=op.pk).state in final)
        op.refresh_from_db()
        document.refresh_from_db()
        return op, document

    return run


@pytest.mark.parametrize("name", ["deep_json", "gzip_bomb_document", "huge_declared", "brotli"])
def test_a_document_read_with_a_hostile_answer_fails_once_as_invalid(point, read_document, name):
    from ledger.models import OperationState

    spec = answer(name)
    with HostileServer(spec) as server:
        point("documents", server)
        op, _document = read_document()
    assert (op.state, op.attention, op.last_error_class) == (
        OperationState.FAILED,
        "invalid",
        "invalid",
    )
    assert spec["words"] in op.last_error_message
    assert op.attempts.count() == 1
    assert len(server.requests) == 1  # told once, never retried


def test_a_document_that_echoes_the_credential_is_shown_without_it(point, read_document):
    from ledger.models import OperationState

    with HostileServer(answer("echo_authorization")) as server:
        point("documents", server, kind="webdav", token=TOKEN)
        op, document = read_document()
    assert op.state == OperationState.CONFIRMED, op.last_error_message
    assert document.text == "Dear council, your request said: [redacted]."
    sent = server.requests[0][1]["authorization"]
    assert sent.startswith("Basic ") and sent.split()[1] not in document.text


@override_settings(READ_BUDGET_SECONDS=4.0)
def test_a_document_that_drips_is_too_slow_to_read_and_not_retried(point, read_document):
    from ledger.models import OperationState

    with HostileServer({**answer("drip"), "headers": {"ETag": '"v1"'}}) as server:
        point("documents", server, kind="webdav", token=TOKEN)
        op, document = read_document()
    assert (op.state, op.last_error_class) == (OperationState.FAILED, "invalid")
    assert "too slow to read" in op.last_error_message
    assert len(server.requests) == 1
    assert document.status == "failed" and "too slow to read" in document.error


def test_a_create_answered_201_with_a_bomb_is_unknown_never_refused(point, make_enquiry, reviewer):
    """The CRM said 201: it created the case. The answer could not be read, so the ID is not
    known: uncertain (reconciled by a look-up), never *invalid* (a person might send it again)."""
    from ledger import tasks
    from ledger.models import OperationState
    from tests.ledger.conftest import approver

    with HostileServer({**answer("gzip_bomb"), "status": 201}) as server:
        point("crm", server)
        _enquiry, op = approver(make_enquiry, reviewer)()
        tasks.execute_operation(str(op.pk))
    op.refresh_from_db()
    assert op.state == OperationState.UNKNOWN
    assert "larger than 2 MB after decompression" in op.last_error_message
    assert "may have acted" in op.last_error_message
    assert server.requests[0][0].startswith("POST ")
