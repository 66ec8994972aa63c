"""A scripted stand-in for BottleCRM's answers, for unit tests that patch ``ledger.http.send``
(the one allowed patch point). Non-2xx answers go through the real ``http.status_error``, so
the classification under test is the product's own."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ledger import http


@dataclass
class Call:
    method: str
    url: str
    params: dict | None
    headers: dict
    json_body: object


@dataclass
class ScriptedDestination:
    """``answers``: a list of (status, body) or exceptions, used in order, one per call."""

    answers: list = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)

    def then(self, status_or_error, body=None):
        self.answers.append(
            status_or_error if isinstance(status_or_error, Exception) else (status_or_error, body)
        )
        return self

    def send(
        self, method, url, *, timeout, json_body=None, params=None, headers=None, max_bytes=None
    ):
        assert timeout and timeout > 0
        self.calls.append(Call(method, url, params, dict(headers or {}), json_body))
        if not self.answers:
            raise AssertionError(f"unexpected call: {method} {url}")
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        text = json.dumps(body) if not isinstance(body, str) else body
        result = http.HttpResult(status, body, text, {"Content-Type": "application/json"})
        if 200 <= status < 300:
            return result
        raise http.status_error(result)

    def posts(self):
        return [c for c in self.calls if c.method == "POST"]


def created(case_id, reference, **case):
    """BottleCRM's answer to a create that kept the reference."""
    return {
        "error": False,
        "message": "Case Created Successfully",
        "id": case_id,
        "cases_obj": {
            "id": case_id,
            "status": "New",
            "custom_fields": {"external_ref": reference},
            **case,
        },
    }


def listed(*cases):
    return {"cases_count": len(cases), "offset": 0, "cases": list(cases)}


def case(case_id, reference, status="New"):
    return {"id": case_id, "status": status, "custom_fields": {"external_ref": reference}}
