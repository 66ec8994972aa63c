"""E-mail through an SMTP relay (the ``smtp`` kind): one message per notify.send operation.

The message is built by Django from the operation's template and payload (ledger.notices), with
a Message-ID made from the idempotency key, and sent through ledger.smtp, which reads the
relay's replies by phase. SMTP has no look-up: an uncertain send goes to a person.
"""

from ledger import notices, smtp
from ledger.connectors.base import CallResult, Connector, ConnectorError, ErrorKind, LookupResult


class SmtpSendConnector(Connector):
    def relay(self) -> smtp.Relay:
        try:
            return smtp.relay_from_url(self.integration.base_url, self.integration.token)
        except ValueError as exc:
            raise ConnectorError(ErrorKind.INVALID, f"message not sent: {exc}") from exc

    def request_summary(self, operation):
        try:
            where = self.relay().describe()
        except ConnectorError as exc:
            where = exc.message
        return {
            **super().request_summary(operation),
            "method": "SMTP",
            "relay": where,
            "message_id": notices.message_id(operation.idempotency_key),
            "reference": operation.payload.get("reference"),
            "template": operation.payload.get("template"),
            # Which version of a resident message's template its words were made from.
            "template_version": operation.payload.get("template_version"),
        }

    def call(self, operation):
        relay = self.relay()
        try:
            email = notices.build(operation)
        except LookupError as exc:
            raise ConnectorError(ErrorKind.INVALID, f"message not sent: {exc}") from exc
        sent = smtp.send(email, relay=relay, timeout=self.timeout)
        message_id = notices.message_id(operation.idempotency_key)
        return CallResult(
            sent.code,
            sent.queue_id or message_id,
            sent.summary(),
            {"delivery": "accepted", "message_id": message_id, "relay_queue_id": sent.queue_id},
        )

    def lookup(self, operation):
        # A relay cannot be asked whether it queued a message: a person looks (its log, the
        # recipient's mailbox) and completes the operation by hand or retries it.
        return LookupResult(supported=False)
