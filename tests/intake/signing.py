"""Sign a body as a Standard Webhooks sender would (reused by every test that posts events)."""

import time
import uuid

from intake.signing import sign


def signed_headers(body: bytes, secret: str, msg_id: str | None = None, timestamp=None) -> dict:
    """The three webhook-* headers for ``body`` signed with ``secret`` (a ``whsec_...`` string).

    ``timestamp`` defaults to now (int seconds); ``msg_id`` to a fresh ``msg_<uuid>``.
    """
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    timestamp = int(time.time()) if timestamp is None else int(timestamp)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
    }
