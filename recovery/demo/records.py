"""The records the demo's stories name, made at the destination the console shows.

A story that names a record (a CRM record confirmed as CRM-…, two found for one reference, an
acknowledgement confirmed as MSG-…) has it made at its integration's destination, through the
integration's own connector (an e-mail integration sends the message), when its write is
played; the story's names are replaced by the IDs the destination returned, in everything the
seed writes (operation, attempts, journal). `make run` seeds after the sandbox and the e-mail
relay start, so every record a page names is there.
"""

from __future__ import annotations

import copy
import time

from ledger import http
from ledger.connectors.base import ConnectorError
from ledger.models import Action
from ledger.policies import connector_for

# How long the seed waits for a destination that is still starting (make run starts the
# sandbox just before seeding).
WAIT_SECONDS = 15.0


class DestinationUnavailable(Exception):
    pass


def at_destination(op, count: int, *, wait: float = WAIT_SECONDS) -> list[str]:
    """Make ``count`` records for ``op``'s reference at its integration's destination; their IDs.

    The first is the write itself, with its idempotency key; each further one is a second
    record for the same reference, as a blind repeat without the key's protection would make
    it (its own key)."""
    connector = connector_for(op)
    if op.action == Action.EXTRACT_DOCUMENT:
        # A read makes nothing: the document it reads is put in the store for it to find.
        return [_retrying(lambda: _put_document(connector, op), op, wait) for _ in range(count)]
    made = []
    for number in range(count):
        twin = op
        if number:
            twin = copy.copy(op)
            twin.idempotency_key = f"{op.idempotency_key}:again-{number}"
        made.append(_call(connector, twin, wait))
    return made


def _put_document(connector, op) -> str:
    response = connector.request(
        "PUT",
        http.path("docs", op.payload["document_id"]),
        data="Photos of the ceiling damage after the leak upstairs.",
        headers={"Content-Type": "text/plain"},
    )
    body = response.body if isinstance(response.body, dict) else {}
    return f"{op.payload['document_id']}@{body.get('version', '')}"


def _call(connector, op, wait: float) -> str:
    return _retrying(lambda: connector.call(op).external_id, op, wait)


def _retrying(make, op, wait: float) -> str:
    deadline = time.monotonic() + wait
    while True:
        try:
            return make()
        except ConnectorError as exc:
            if exc.kind.value != "transient" or time.monotonic() >= deadline:
                raise DestinationUnavailable(
                    f"the demo could not make its records at {op.integration.base_url}: {exc}"
                ) from exc
            time.sleep(0.3)
