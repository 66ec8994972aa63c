"""A real SMTP server (aiosmtpd) that keeps what it receives, with fault modes set over a small
HTTP control API: the e-mail relay for tests, the drill and `make run`.

It answers as a relay does: ``250 2.0.0 Ok: queued as <id>`` after the final dot. It keeps each
message as an .eml file in its folder and counts the messages per Message-ID. Faults, for the
next N connections or messages (``count``), or until cleared:

- ``refuse``: nothing listens on the SMTP port (connection refused) until the faults are cleared;
- ``421``: MAIL FROM answered "421 4.3.2 Service not available";
- ``550``: RCPT TO answered "550 5.1.1 ... User unknown" (for ``recipient``, or everyone);
- ``drop_after_data``: the message is received and kept, then the connection is closed before
  the reply to the final dot;
- ``late``: the message is received and kept, and the reply comes ``delay`` seconds later;
- ``garbage_greeting``: the connection is greeted with a line that is not SMTP;
- ``drip``: the reply to MAIL FROM is sent one byte every ``delay`` seconds;
- ``slow_replies``: every reply on the connection (the greeting first) comes ``delay`` seconds
  late;
- ``long_reply``: the reply to MAIL FROM is 250 in 2,000 lines (about 130 KB);
- ``slow_quit``: QUIT is answered ``delay`` seconds later (``quits_answered`` in the stats
  counts the answers given);
- ``no_smtputf8``: the server stops offering SMTPUTF8 (RFC 6531) until the faults are cleared.

Control API (JSON): ``GET /_mail/stats``, ``GET /_mail/messages``, ``POST /_mail/faults``
(``{"mode": ..., "count": 1, "recipient": ..., "delay": ...}``), ``DELETE /_mail/faults``,
``POST /_mail/reset`` (faults and messages). Standard library and aiosmtpd only.
"""

from __future__ import annotations

import argparse
import asyncio
import email
import email.policy
import json
import re
import secrets
import signal
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP

MODES = (
    "refuse",
    "421",
    "550",
    "drop_after_data",
    "late",
    "garbage_greeting",
    "drip",
    "long_reply",
    "slow_replies",
    "slow_quit",
    "no_smtputf8",
)
UNTIL_CLEARED = ("refuse", "no_smtputf8")


@dataclass
class Fault:
    mode: str
    count: int | None = 1  # None: until cleared
    recipient: str = ""
    delay: float = 0.0

    def as_dict(self):
        return {
            "mode": self.mode,
            "count": self.count,
            "recipient": self.recipient,
            "delay": self.delay,
        }


class Mailbox:
    """What the server received, in memory and as .eml files; the faults it is to make."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.messages: list[dict] = []
        self.faults: list[Fault] = []
        self.refusing = False
        self.smtputf8 = True
        self.quits_answered = 0

    def take_fault(self, mode: str, recipient: str = "") -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.mode != mode:
                    continue
                if fault.recipient and fault.recipient.lower() != recipient.lower():
                    continue
                if fault.count is not None:
                    fault.count -= 1
                    if fault.count <= 0:
                        self.faults.remove(fault)
                return fault
        return None

    def keep(self, envelope) -> dict:
        content = envelope.content
        parsed = email.message_from_bytes(content, policy=email.policy.default)
        message_id = str(parsed.get("Message-ID", "")).strip()
        with self.lock:
            number = len(self.messages) + 1
            stem = re.sub(r"[^A-Za-z0-9]+", "-", message_id).strip("-")[:60] or "no-id"
            path = self.folder / f"{number:06d}-{stem}.eml"
            path.write_bytes(content)
            record = {
                "number": number,
                "message_id": message_id,
                "from": envelope.mail_from,
                "to": list(envelope.rcpt_tos),
                "mail_options": list(envelope.mail_options),
                "subject": str(parsed.get("Subject", "")),
                "file": path.name,
                # When the message was kept, just before the 250 (wall clock: the bench's
                # intake-to-250 figure compares it with the time the event was posted).
                "received_at": time.time(),
            }
            self.messages.append(record)
        return record

    def stats(self) -> dict:
        with self.lock:
            counts: dict[str, int] = {}
            for record in self.messages:
                counts[record["message_id"]] = counts.get(record["message_id"], 0) + 1
            return {
                "received": len(self.messages),
                "by_message_id": counts,
                "faults": [f.as_dict() for f in self.faults],
                "refusing": self.refusing,
                "smtputf8": self.smtputf8,
                "quits_answered": self.quits_answered,
            }

    def reset(self, *, messages: bool):
        with self.lock:
            self.faults.clear()
            self.smtputf8 = True
            if messages:
                self.quits_answered = 0
                self.messages.clear()
                for path in self.folder.glob("*.eml"):
                    path.unlink()


class Handler:
    """aiosmtpd's hooks: where the faults are made."""

    def __init__(self, mailbox: Mailbox):
        self.mailbox = mailbox

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        if self.mailbox.take_fault("421"):
            return "421 4.3.2 Service not available, closing transmission channel"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        if self.mailbox.take_fault("long_reply"):
            return "\r\n".join(["250-" + "x" * 60] * 2000 + ["250 2.1.0 Ok"])
        drip = self.mailbox.take_fault("drip")
        if drip is not None:
            # All but the last byte, one at a time; aiosmtpd writes the rest and the line end.
            for byte in b"250 2.1.0 O":
                server._writer.write(bytes([byte]))
                await server._writer.drain()
                await asyncio.sleep(drip.delay)
            return "k"
        return "250 2.1.0 Ok"

    async def handle_QUIT(self, server, session, envelope):
        slow = self.mailbox.take_fault("slow_quit")
        if slow is not None:
            await asyncio.sleep(slow.delay)
        with self.mailbox.lock:
            self.mailbox.quits_answered += 1
        return "221 Bye"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if self.mailbox.take_fault("550", address):
            return f"550 5.1.1 <{address}>: Recipient address rejected: User unknown"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 Ok"

    async def handle_DATA(self, server, session, envelope):
        self.mailbox.keep(envelope)
        if self.mailbox.take_fault("drop_after_data"):
            # Kept, and the reply never goes out: the sender cannot know we have it.
            server.transport.abort()
            return "250 2.0.0 Ok (never seen)"
        late = self.mailbox.take_fault("late")
        if late is not None:
            await asyncio.sleep(late.delay)
        return f"250 2.0.0 Ok: queued as {secrets.token_hex(5).upper()}"


class FaultySMTP(SMTP):
    """aiosmtpd's server, whose greeting can be garbage."""

    def __init__(self, *args, mailbox: Mailbox, **kwargs):
        self.mailbox = mailbox
        self.greeted = False
        self.slow: Fault | None = None
        super().__init__(*args, **kwargs)

    async def push(self, status):
        if not self.greeted:
            self.greeted = True
            self.slow = self.mailbox.take_fault("slow_replies")
            if self.mailbox.take_fault("garbage_greeting"):
                status = b"\x00\xff-1 this is not SMTP"
        if self.slow is not None:
            await asyncio.sleep(self.slow.delay)
        await super().push(status)


class FaultyController(Controller):
    def __init__(self, *args, mailbox: Mailbox, **kwargs):
        self.mailbox = mailbox
        super().__init__(*args, **kwargs)

    def factory(self):
        return FaultySMTP(self.handler, mailbox=self.mailbox, **self.SMTP_kwargs)


class MailServer:
    def __init__(self, host: str, port: int, folder: Path):
        self.host, self.port = host, port
        self.mailbox = Mailbox(folder)
        self.controller: Controller | None = None

    def listen(self):
        if self.controller is not None and self.controller.SMTP_kwargs.get("enable_SMTPUTF8") != (
            self.mailbox.smtputf8
        ):
            self.controller.stop()
            self.controller = None
        if self.controller is None:
            self.controller = FaultyController(
                Handler(self.mailbox),
                mailbox=self.mailbox,
                hostname=self.host,
                port=self.port,
                enable_SMTPUTF8=self.mailbox.smtputf8,
                ready_timeout=10.0,
            )
            self.controller.start()
        self.mailbox.refusing = False

    def refuse(self):
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        self.mailbox.refusing = True

    def set_fault(self, fault: Fault):
        if fault.mode == "refuse":
            self.refuse()
            return
        if fault.mode == "no_smtputf8":
            self.mailbox.smtputf8 = False
            self.listen()
            return
        with self.mailbox.lock:
            self.mailbox.faults.append(fault)

    def clear_faults(self, *, messages=False):
        self.mailbox.reset(messages=messages)
        self.listen()


def parse_fault(body) -> Fault:
    if not isinstance(body, dict) or body.get("mode") not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    count = body.get("count", 1)
    if count is not None and (not isinstance(count, int) or count < 1):
        raise ValueError("count must be a whole number from 1, or null (until cleared)")
    delay = body.get("delay", 0.0)
    if not isinstance(delay, int | float) or delay < 0:
        raise ValueError("delay must be a number of seconds")
    recipient = body.get("recipient", "") or ""
    if not isinstance(recipient, str):
        raise ValueError("recipient must be an address")
    return Fault(body["mode"], None if body["mode"] in UNTIL_CLEARED else count, recipient, delay)


def control_handler(server: MailServer):
    class Control(BaseHTTPRequestHandler):
        def log_message(self, format, *args):
            pass

        def _answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self):
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"null")

        def do_GET(self):
            if self.path == "/_mail/stats":
                return self._answer(200, server.mailbox.stats())
            if self.path == "/_mail/messages":
                with server.mailbox.lock:
                    return self._answer(200, {"messages": list(server.mailbox.messages)})
            return self._answer(200 if self.path == "/" else 404, {"smtp_port": server.port})

        def do_POST(self):
            try:
                body = self._body()
            except ValueError:
                return self._answer(400, {"error": "not JSON"})
            if self.path == "/_mail/faults":
                try:
                    fault = parse_fault(body)
                except ValueError as exc:
                    return self._answer(400, {"error": str(exc)})
                server.set_fault(fault)
                return self._answer(200, server.mailbox.stats())
            if self.path == "/_mail/reset":
                server.clear_faults(messages=True)
                return self._answer(200, server.mailbox.stats())
            return self._answer(404, {"error": "no such path"})

        def do_DELETE(self):
            if self.path == "/_mail/faults":
                server.clear_faults()
                return self._answer(200, server.mailbox.stats())
            return self._answer(404, {"error": "no such path"})

    return Control


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="the SMTP port")
    parser.add_argument("--control-port", type=int, default=0, help="0: no control API")
    parser.add_argument("--dir", type=Path, required=True, help="where .eml files are kept")
    args = parser.parse_args(argv)
    server = MailServer(args.host, args.port, args.dir)
    server.listen()
    print(
        f"mail server: SMTP on {args.host}:{args.port}, keeping messages in {args.dir}", flush=True
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    control = None
    if args.control_port:
        control = ThreadingHTTPServer((args.host, args.control_port), control_handler(server))
        threading.Thread(target=control.serve_forever, daemon=True).start()
        print(
            f"mail server: control API on http://{args.host}:{args.control_port}/_mail/", flush=True
        )
    try:
        stop.wait()
    finally:
        if control is not None:
            control.shutdown()
        if server.controller is not None:
            server.controller.stop()
