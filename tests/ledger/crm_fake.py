"""The CRM of the handover kind (the sandbox's ``/crm/enquiries``) in this process, for engine
tests that patch ``ledger.http.send`` (the one allowed patch point) instead of waiting out a
real timeout against the sandbox process.

It keeps records by reference and honours an Idempotency-Key as the sandbox does; a fault
armed on ``crm.create`` or ``crm.lookup`` is used by the next call to it:

- ``timeout_after_commit``: the record is written, and the call raises what ``http.send``
  raises when no answer comes within the timeout (uncertain), at once;
- ``error_<status>``: that status, classified by the product's own ``http.status_error``.

The end-to-end versions, against the sandbox process, stay in tests/ledger/test_execution.py.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ledger import http
from ledger.connectors.base import ConnectorError, ErrorKind

BASE_URL = "http://crm.test"
CREATE, LOOKUP = "crm.create", "crm.lookup"


@dataclass
class FakeCrm:
    idempotency_key: bool = True
    lookup: bool = True
    records: list[dict] = field(default_factory=list)
    requests: Counter = field(default_factory=Counter)
    faults: dict[str, list[str]] = field(default_factory=dict)
    _keys: dict[str, dict] = field(default_factory=dict)

    def fault(self, target: str, mode: str, count: int = 1) -> None:
        self.faults.setdefault(target, []).extend([mode] * count)

    def write(self, reference: str) -> dict:
        """A record made by someone else (another integration writing the same reference)."""
        record = {"id": f"crm_{len(self.records) + 1}", "reference": reference}
        self.records.append(record)
        return record

    def count(self, reference: str | None = None) -> int:
        return sum(1 for r in self.records if reference is None or r["reference"] == reference)

    def send(
        self,
        method,
        url,
        *,
        timeout,
        json_body=None,
        params=None,
        headers=None,
        data=None,
        max_bytes=None,
    ):
        assert timeout and timeout > 0
        path = urlsplit(url).path
        if (method, path) == ("POST", "/crm/enquiries"):
            return self._create(json_body or {}, headers or {}, timeout)
        if (method, path) == ("GET", "/crm/enquiries"):
            return self._lookup((params or {}).get("reference"))
        raise AssertionError(f"the fake CRM has no {method} {path}")

    def _fault(self, target):
        pending = self.faults.get(target) or []
        return pending.pop(0) if pending else None

    def _create(self, payload, headers, timeout):
        self.requests[CREATE] += 1
        fault = self._fault(CREATE)
        if fault and fault.startswith("error_"):
            return _answer(int(fault.removeprefix("error_")), {"error": fault})
        key = headers.get("Idempotency-Key") if self.idempotency_key else None
        if key and key in self._keys:
            return _answer(200, self._keys[key], {"Idempotent-Replayed": "true"})
        record = self.write(payload["reference"])
        if key:
            self._keys[key] = record
        if fault == "timeout_after_commit":
            raise ConnectorError(ErrorKind.UNCERTAIN, f"no answer within {timeout}s")
        assert fault is None, fault
        return _answer(201, record)

    def _lookup(self, reference):
        self.requests[LOOKUP] += 1
        fault = self._fault(LOOKUP)
        if fault and fault.startswith("error_"):
            return _answer(int(fault.removeprefix("error_")), {"error": fault})
        if not self.lookup:
            return _answer(501, {"error": "lookup_unsupported"})
        return _answer(200, {"results": [r for r in self.records if r["reference"] == reference]})


def _answer(status, body, headers=None):
    result = http.HttpResult(
        status, body, json.dumps(body), {"Content-Type": "application/json", **(headers or {})}
    )
    if 200 <= status < 300:
        return result
    raise http.status_error(result)
