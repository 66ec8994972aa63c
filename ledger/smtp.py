"""The one SMTP wrapper: the twin of ledger.http for e-mail. Every failure becomes a
ConnectorError whose kind says what is known about the relay, read from the phase it failed in.

Django builds the message (EmailMultiAlternatives.message()) and opens the connection (its SMTP
backend: connect, EHLO, STARTTLS or implicit TLS, log-in). The envelope and DATA are sent here,
one command at a time, because Django's backend hides the phase a failure happened in, and the
phase is the whole difference:

- before the message's final dot (connect, greeting, log-in, MAIL, RCPT, DATA): the relay
  cannot have taken the message. A refused or lost connection, a timeout, a reply that is not
  SMTP (a garbage greeting) and any 4xx (421 among them) are transient; a 5xx is invalid, with
  the relay's own text; 535 (credentials refused) and 530 (log-in required) are auth; a reply
  longer than Handover reads (ledger.smtpwire) is invalid. Everything up to the final dot must
  happen within ``conversation_deadline``, so that the reply to the dot always has its whole
  timeout inside the worker's life.
- after the final dot: a 250 is confirmed (with the relay's queue id when its reply names one);
  a 4xx or 5xx reply means the relay refused it (transient / invalid); a connection lost, a
  timeout or an unreadable reply is **uncertain**: the relay may have queued the message. SMTP
  has no look-up, so the error carries the ``smtp_no_reply`` attention: a person decides, never
  a blind resend (docs/runbooks/unknown-outcome.md). QUIT is sent without waiting for its
  answer: a relay slow to say goodbye cannot hold the 250 from being recorded.

Addresses (ledger.mailaddress): an international domain is written as its IDNA A-label; a local
part outside ASCII needs the relay's SMTPUTF8 (RFC 6531), and where the relay does not offer it
the message is invalid, in words, before anything is sent.

Tests patch ``ledger.smtp.send`` (and nothing else) in unit tests.
"""

from __future__ import annotations

import io
import re
import smtplib
import ssl
import time
from dataclasses import dataclass
from email import policy as email_policy
from email.generator import BytesGenerator
from urllib.parse import unquote, urlsplit

from django.conf import settings

from ledger import mailaddress, smtpwire
from ledger.errors import ConnectorError, ErrorKind

NO_REPLY_ATTENTION = "smtp_no_reply"
SCHEMES = {"smtp": "none", "smtp+starttls": "starttls", "smtps": "ssl"}
DEFAULT_PORTS = {"none": 25, "starttls": 587, "ssl": 465}
AUTH_CODES = {530, 535, 534, 538}
# What the worker's guard (Q_TIMEOUT) keeps beyond the reply to the final dot: recording the
# outcome, and the lease's own grace.
GUARD_MARGIN_SECONDS = 5.0
# "250 2.0.0 Ok: queued as 4F1B2C3D" (Postfix), "250 OK id=1abc-000-XY" (Exim),
# "250 2.0.0 <id> Message accepted" forms vary; the first two are the common ones.
_QUEUE_ID = [
    re.compile(r"queued as\s+([A-Za-z0-9._@<>-]+)", re.I),
    re.compile(r"\bid=([A-Za-z0-9._@<>-]+)", re.I),
]


@dataclass(frozen=True)
class Relay:
    """Where and how to reach the relay: from an integration's address (``smtp://``,
    ``smtp+starttls://`` or ``smtps://``, user name in the address, password in the token)."""

    host: str
    port: int
    security: str  # none, starttls, ssl
    username: str = ""
    password: str = ""

    def describe(self) -> str:
        how = {"none": "plain", "starttls": "STARTTLS", "ssl": "TLS"}[self.security]
        return f"{self.host}:{self.port} ({how})"


def relay_from_url(url: str, password: str = "") -> Relay:
    """The relay an address names; ValueError (in words) when it names none."""
    parts = urlsplit(url or "")
    security = SCHEMES.get(parts.scheme.lower())
    if security is None:
        raise ValueError(
            "An e-mail relay's address starts smtp://, smtp+starttls:// or smtps:// "
            "(for example smtp+starttls://relay.example.org:587)."
        )
    try:
        port = parts.port
    except ValueError:
        raise ValueError("The relay's port is not a number from 1 to 65535.") from None
    if not parts.hostname:
        raise ValueError("The relay's address names no host.")
    if parts.password is not None:
        # An address is shown and journalled; a password there would be too.
        raise ValueError(
            "Put the relay's password in the token field, not in the address (the address is "
            "shown on pages and written to the journal)."
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("A relay's address is only scheme://[user@]host[:port].")
    return Relay(
        host=parts.hostname,
        port=port or DEFAULT_PORTS[security],
        security=security,
        username=unquote(parts.username or ""),
        password=password or "",
    )


@dataclass
class SmtpResult:
    code: int
    text: str
    queue_id: str = ""

    def summary(self) -> str:
        return f"{self.code} {self.text}"[:2000]


def queue_id(text: str) -> str:
    for pattern in _QUEUE_ID:
        match = pattern.search(text or "")
        if match:
            return match.group(1).strip("<>")
    return ""


def _text(reply) -> str:
    if isinstance(reply, bytes):
        return reply.decode("utf-8", "replace")
    return str(reply or "")


def _refused(code: int, text: str, phase: str) -> ConnectorError:
    said = f"{code} {text}".strip()
    if code in AUTH_CODES:
        kind = ErrorKind.AUTH
    elif 400 <= code < 500:
        kind = ErrorKind.TRANSIENT
    else:
        kind = ErrorKind.INVALID
    return ConnectorError(kind, f"{phase}: {said}"[:2000], status=code, body=said[:2000])


def conversation_deadline(timeout: float) -> float:
    """Seconds the conversation may take up to the final dot: what the worker's guard
    (Q_TIMEOUT) leaves once the reply to the dot has had its whole timeout, and never less
    than one timeout (Integration.clean keeps the timeout under Q_TIMEOUT)."""
    cluster = float(settings.Q_CLUSTER.get("timeout") or 60)
    return max(timeout, cluster - timeout - GUARD_MARGIN_SECONDS)


def open_connection(relay: Relay, *, timeout: float, deadline: float | None = None):
    """Django's SMTP backend on the bounded client (ledger.smtpwire), opened (connected, TLS,
    logged in); ConnectorError otherwise. Nothing of a message has been sent yet, so nothing
    here is uncertain."""
    backend = smtpwire.BoundedBackend(
        host=relay.host,
        port=relay.port,
        username=relay.username or None,
        password=relay.password or None,
        use_tls=relay.security == "starttls",
        use_ssl=relay.security == "ssl",
        timeout=timeout,
        fail_silently=False,
        deadline=deadline,
    )
    # Django's backend logs in only when both are set; an empty user means no log-in.
    if not relay.username:
        backend.username = backend.password = ""
    where = relay.describe()
    try:
        backend.open()
        # Django's backend greets only for STARTTLS or a log-in; the envelope needs it always.
        backend.connection.ehlo_or_helo_if_needed()
    except smtplib.SMTPHeloError as exc:
        raise _refused(exc.smtp_code, _text(exc.smtp_error), f"{where} refused EHLO") from exc
    except smtplib.SMTPAuthenticationError as exc:
        raise _refused(exc.smtp_code, _text(exc.smtp_error), "log-in refused") from exc
    except smtplib.SMTPConnectError as exc:
        raise _refused(exc.smtp_code, _text(exc.smtp_error), f"{where} greeted") from exc
    except smtplib.SMTPNotSupportedError as exc:
        raise ConnectorError(
            ErrorKind.INVALID, f"{where} does not offer what the address asks for: {exc}"
        ) from exc
    except smtplib.SMTPResponseException as exc:
        raise _refused(exc.smtp_code, _text(exc.smtp_error), f"{where} refused") from exc
    except ssl.SSLCertVerificationError as exc:
        raise ConnectorError(
            ErrorKind.INVALID, f"{where}: its TLS certificate is not trusted ({exc.reason})"
        ) from exc
    except (OSError, smtplib.SMTPException) as exc:
        # Refused, unreachable, a timeout, a drop, a reply that is not SMTP or too long,
        # before or during the greeting: nothing was sent.
        raise before_dot(exc, relay) from exc
    return backend


def before_dot(exc: Exception, relay: Relay) -> ConnectorError:
    """A failure before the message's final dot went out: the relay cannot have taken it."""
    where = relay.describe()
    if isinstance(exc, smtpwire.ReplyTooLong):
        return ConnectorError(ErrorKind.INVALID, f"not sent: {exc} ({where})")
    if isinstance(exc, smtpwire.GarbledReply | smtpwire.ReplyTimeout):
        return ConnectorError(ErrorKind.TRANSIENT, f"not sent: {exc} ({where})")
    return ConnectorError(ErrorKind.TRANSIENT, f"not sent: not connected to {where}: {exc}")


def _quoted(data: bytes) -> bytes:
    """The message as DATA carries it (RFC 5321 4.5.2): leading dots doubled, the final dot."""
    data = re.sub(rb"(?m)^\.", b"..", data)
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data + b".\r\n"


def envelope(email) -> tuple[mailaddress.MailAddress, list[mailaddress.MailAddress]]:
    try:
        sender = mailaddress.parse(email.from_email)
        recipients = [mailaddress.parse(r) for r in email.recipients()]
    except mailaddress.AddressError as exc:
        raise ConnectorError(ErrorKind.INVALID, f"message not sent: {exc}") from exc
    if not recipients:
        raise ConnectorError(ErrorKind.INVALID, "message not sent: it has no recipient")
    return sender, recipients


def message_bytes(email, sender, recipients) -> bytes:
    """The message as Django builds it, its addresses as the envelope writes them: domains in
    ASCII (IDNA), and where a local part is not ASCII, the address headers in UTF-8 as RFC
    6532 has them (Django would write an RFC 2047 word, which no address may hold)."""

    def ascii_form(values):
        return [mailaddress.parse(v).header() for v in values]  # each parsed by envelope()

    # Bcc is never a header; the envelope (ledger.smtp.envelope) carries every recipient.
    email.to, email.cc = ascii_form(email.to), ascii_form(email.cc)
    if sender.written != sender.address:
        email.from_email = sender.header()
    if not (sender.needs_smtputf8 or any(r.needs_smtputf8 for r in recipients)):
        return email.message().as_bytes(linesep="\r\n")
    message = email.message()
    headers = {"To": email.to, "Cc": email.cc}
    for name, values in headers.items():
        if values and name in message:
            message.replace_header(name, ", ".join(values))
    if sender.needs_smtputf8:
        message.replace_header("From", sender.header())
    out = io.BytesIO()
    policy = email_policy.SMTPUTF8.clone(linesep="\r\n")
    BytesGenerator(out, mangle_from_=False, policy=policy).flatten(message)
    return out.getvalue()


def send(email, *, relay: Relay, timeout: float) -> SmtpResult:
    """Send one EmailMessage (built by Django) to its recipients. A 250 after the final dot
    returns; everything else raises ConnectorError."""
    if not timeout or timeout <= 0:
        raise ValueError("every external call needs a timeout")
    sender, recipients = envelope(email)
    international = [a for a in [sender, *recipients] if a.needs_smtputf8]
    try:
        data = message_bytes(email, sender, recipients)
    except (UnicodeError, ValueError) as exc:
        raise ConnectorError(ErrorKind.INVALID, f"message not built: {exc}") from exc
    deadline = time.monotonic() + conversation_deadline(timeout)
    backend = open_connection(relay, timeout=timeout, deadline=deadline)
    smtp = backend.connection
    try:
        options = mail_options(smtp, international)
        try:
            code, reply = smtp.mail(sender.address, options)
            if code != 250:
                raise _refused(code, _text(reply), f"sender {sender.written} refused")
            for recipient in recipients:
                code, reply = smtp.rcpt(recipient.address)
                if code not in (250, 251):
                    raise _refused(code, _text(reply), f"recipient {recipient.written} refused")
            code, reply = smtp.docmd("DATA")
            if code != 354:
                raise _refused(code, _text(reply), "DATA refused")
            smtp.send(_quoted(data))
        except ConnectorError:
            raise
        except (OSError, smtplib.SMTPException) as exc:
            # The final dot has not gone out: the relay cannot have taken the message.
            raise before_dot(exc, relay) from exc
        return final_reply(smtp, relay, timeout)
    finally:
        smtp.quit_without_waiting()


def mail_options(smtp, international) -> list[str]:
    """MAIL FROM's options: SMTPUTF8 (and 8BITMIME) where an address needs it, or INVALID
    before anything is sent when the relay does not offer it."""
    if not international:
        return []
    if not smtp.has_extn("smtputf8"):
        raise ConnectorError(
            ErrorKind.INVALID,
            "message not sent: the relay does not accept international addresses (SMTPUTF8); "
            f"the address {international[0].written} cannot be written",
        )
    return ["SMTPUTF8", "BODY=8BITMIME"] if smtp.has_extn("8bitmime") else ["SMTPUTF8"]


def final_reply(smtp, relay: Relay, timeout: float) -> SmtpResult:
    """The reply to the final dot, with its whole timeout: 250 is confirmed; a 4xx or 5xx a
    refusal; nothing (or nothing readable) within the timeout is uncertain."""
    smtp.deadline = None
    try:
        code, reply = smtp.getreply()
    except (OSError, smtplib.SMTPException) as exc:
        raise ConnectorError(
            ErrorKind.UNCERTAIN,
            f"the message was sent to {relay.describe()}, and no readable reply came "
            f"(within {timeout:g}s or before the connection closed: {exc}). The relay may "
            "have queued it; SMTP cannot be asked.",
            attention=NO_REPLY_ATTENTION,
        ) from exc
    text = _text(reply)
    if code != 250:
        raise _refused(code, text, "message refused")
    return SmtpResult(code, text, queue_id(text))


def check(relay: Relay, *, timeout: float) -> list[str]:
    """Connect, log in and say goodbye: what is wrong, in words (nothing: ready)."""
    try:
        # Bounded as a whole, not only per reply: a relay that drips cannot hold the web
        # process that asked.
        backend = open_connection(relay, timeout=timeout, deadline=time.monotonic() + 2 * timeout)
    except ConnectorError as exc:
        if exc.kind is ErrorKind.AUTH:
            return [
                f"{relay.describe()} refused Handover's log-in ({exc.message}). Check the user "
                "name in the address and the password in the token."
            ]
        # A check sends nothing: "not sent" would only puzzle the admin who asked.
        said = exc.message.removeprefix("not sent: ")
        return [f"Cannot use the relay at {relay.describe()}: {said}"]
    try:
        code, reply = backend.connection.noop()
        if code != 250:
            return [f"{relay.describe()} answered NOOP with {code} {_text(reply)}"]
    except (OSError, smtplib.SMTPException) as exc:
        return [f"{relay.describe()} dropped the connection after log-in: {exc}"]
    finally:
        backend.connection.quit_without_waiting()
    return []
