"""The SMTP conversation with its bounds: smtplib's client, reading the relay's replies within
limits a hostile or broken relay cannot stretch (ledger.smtp uses it through Django's backend).

smtplib reads each reply line with the socket's timeout, which is per read, not per reply: a
relay that sends one byte a second never times out, and a multi-line reply has no end. Here
every reply is read

- within ``timeout`` seconds from the moment Handover waits for it (however it drips), and,
  before the message's final dot, also within the conversation's ``deadline``: so the reply to
  the final dot always has its whole timeout before the worker's own guard (Q_TIMEOUT) could
  stop the process holding it;
- at most ``MAX_LINE`` bytes a line (smtplib's own 8,192) and ``MAX_REPLY_BYTES`` a reply;
- only as SMTP: three digits from 200 to 599 (RFC 5321 4.2), then a space, a hyphen or the end
  of the line. Anything else (a greeting of garbage, ``-12``, ``000``) is ``GarbledReply``,
  never a made-up code that a record could not store.
"""

from __future__ import annotations

import io
import math
import smtplib
import time

from django.core.mail.backends.smtp import EmailBackend

MAX_LINE = smtplib._MAXLINE  # 8192: what smtplib itself allows a line
MAX_REPLY_BYTES = 64 * 1024  # a whole reply, every line of it (an EHLO lists ~20 lines)


class GarbledReply(smtplib.SMTPException):
    """What the relay sent is not an SMTP reply."""

    def __init__(self, line: bytes):
        self.line = line[:80]
        shown = "".join(
            c if c.isascii() and c.isprintable() else f"\\x{ord(c):02x}"
            for c in self.line.decode("latin-1").rstrip("\r\n")
        )
        super().__init__(f"the relay's reply is not SMTP: “{shown}”")


class ReplyTooLong(smtplib.SMTPException):
    """A reply (or one of its lines) longer than Handover reads."""

    def __init__(self, size: int, limit: int, what: str = "reply"):
        self.size = size
        super().__init__(
            f"the relay's {what} was longer than {limit:,} bytes ({size:,} read); "
            "Handover stopped reading it"
        )


class ReplyTimeout(TimeoutError):
    """No whole reply within the time it was given."""


def valid_code(code: bytes) -> bool:
    return len(code) == 3 and code.isdigit() and b"2" <= code[:1] <= b"5"


class _Reader(io.RawIOBase):
    """The socket, read so that every read waits at most until the reply's deadline."""

    def __init__(self, client: BoundedSMTP):
        self.client = client

    def readable(self):
        return True

    def readinto(self, buffer):
        left = self.client.reply_deadline - time.monotonic()
        if left <= 0:
            raise ReplyTimeout(self.client.late_words())
        self.client.sock.settimeout(left)
        return self.client.sock.recv_into(buffer)


class BoundedSMTP(smtplib.SMTP):
    """smtplib.SMTP whose replies are read within the bounds above.

    ``deadline`` (time.monotonic()) bounds everything up to the final dot; ledger.smtp lifts
    it (``deadline = None``) before the dot goes out, so that reply gets its full timeout."""

    def __init__(self, *args, deadline: float | None = None, **kwargs):
        self.deadline = deadline
        self.reply_deadline = math.inf
        self.reply_bytes = 0  # of the last reply: what a test counts
        super().__init__(*args, **kwargs)

    def _limit(self) -> float:
        seconds = self.timeout if isinstance(self.timeout, int | float) else 60.0
        limit = time.monotonic() + seconds
        return limit if self.deadline is None else min(limit, self.deadline)

    def late_words(self) -> str:
        if self.deadline is not None and self.reply_deadline >= self.deadline:
            return "the relay took too long before the message could be sent"
        return f"no whole reply from the relay within {self.timeout:g}s"

    def send(self, s):
        if self.sock is not None:
            left = self._limit() - time.monotonic()
            if left <= 0:
                self.close()
                raise ReplyTimeout("the relay took too long before the message could be sent")
            self.sock.settimeout(left)  # sendall's timeout is its total (Python 3.5+)
        return super().send(s)

    def getreply(self):
        self.reply_deadline = self._limit()
        if self.file is None:
            # A new reader after STARTTLS too (smtplib drops self.file there): nothing read
            # before TLS began is ever taken as part of a reply after it.
            self.file = io.BufferedReader(_Reader(self), buffer_size=4096)
        lines = []
        total = 0
        try:
            while True:
                line = self.file.readline(MAX_LINE + 1)
                if not line:
                    raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")
                total += len(line)
                if len(line) > MAX_LINE:
                    raise ReplyTooLong(total, MAX_LINE, "reply line")
                if total > MAX_REPLY_BYTES:
                    raise ReplyTooLong(total, MAX_REPLY_BYTES)
                code, separator = line[:3], line[3:4]
                if not valid_code(code) or separator not in (b" ", b"-", b"\r", b"\n", b""):
                    raise GarbledReply(line)
                lines.append(line[4:].strip(b" \t\r\n"))
                if separator != b"-":
                    break
        except TimeoutError as exc:
            self.reply_bytes = total
            self.close()
            if isinstance(exc, ReplyTimeout):
                raise
            raise ReplyTimeout(self.late_words()) from exc
        except (OSError, smtplib.SMTPException):
            self.reply_bytes = total
            self.close()
            raise
        self.reply_bytes = total
        return int(code), b"\n".join(lines)

    def quit_without_waiting(self):
        """Say goodbye and close, waiting for no answer: the outcome is already known, and a
        relay slow to answer QUIT must not hold the worker that has it to record."""
        try:
            if self.sock is not None:
                self.sock.settimeout(1.0)
                self.sock.sendall(b"QUIT\r\n")
        except OSError:
            pass
        self.close()


class BoundedSMTP_SSL(BoundedSMTP, smtplib.SMTP_SSL):
    pass


class BoundedBackend(EmailBackend):
    """Django's SMTP backend (connect, EHLO, STARTTLS or TLS, log-in) on the bounded client."""

    def __init__(self, *args, deadline: float | None = None, **kwargs):
        self.deadline = deadline
        super().__init__(*args, **kwargs)

    @property
    def connection_class(self):
        cls = BoundedSMTP_SSL if self.use_ssl else BoundedSMTP
        deadline = self.deadline

        def connect(*args, **kwargs):
            return cls(*args, deadline=deadline, **kwargs)

        return connect
