"""``bench/soak.py --relay-down SECONDS``: the notification integration speaks e-mail (kind
``smtp``) to the harness's own relay (harness/mailserver, its own process), which refuses every
connection (fault ``refuse``) from the start, while the soak's enquiries arrive, until SECONDS
after the last event was sent, and is then brought back. E-mail's retry window is the drill's
(EMAIL_RETRY_FIRST_SECONDS=1, EMAIL_RETRY_MAX_SECONDS=2, from
harness.drill.processes.child_environment), so a message refused is tried again by itself
within seconds of the relay's return.

Counted after quiescence: acknowledgements proposed, confirmed, and received at the relay; the
relay's duplicates by Message-ID (0 expected); people involved (journal rows by anyone but the
system on any e-mail operation of the run, 0 expected)."""

from __future__ import annotations

import time

from bench.soak_common import SOURCE, db_retry, log


class Relay:
    """Mixed into bench.soak.Soak, which holds the run's state."""

    relay = None
    relay_back_at: float | None = None
    states_when_back: dict | None = None

    def setup_relay(self):
        from harness.mailserver import MailServer
        from ledger.kinds import SMTP
        from ledger.models import Integration

        self.relay = MailServer(self.dir / "mail" / "messages", log_path=self.dir / "mail.log")
        self.relay.start()
        Integration.objects.filter(name=Integration.NOTIFY).update(
            kind=SMTP, base_url=self.relay.url, supports_lookup=False
        )
        self.relay.fault("refuse")
        log(f"relay {self.relay.url}: refusing connections for {self.args.relay_down:g} s")

    def relay_loop(self, started: float):
        """Brings the relay back SECONDS after the last event was sent (or when the run is
        stopped)."""
        while not self.all_sent.is_set() and not self.stop_chaos.is_set():
            time.sleep(0.2)
        back_at = time.monotonic() + self.args.relay_down
        while time.monotonic() < back_at and not self.stop_chaos.is_set():
            time.sleep(0.2)
        self.states_when_back = db_retry(self._acknowledgement_states)
        self.relay.clear_faults()
        self.relay_back_at = time.monotonic() - started
        log(
            f"relay back after {self.relay_back_at:.0f} s; acknowledgements by state then: "
            f"{self.states_when_back}"
        )

    def reviewers_wait_for_relay(self) -> bool:
        """With the relay down, the enquiries wait in review (as a morning's do before the
        reviewers read them) until it is back and the acknowledgements due have gone out: an
        enquiry approved first would have its acknowledgement cancelled, its moment passed (the
        resident is told it was passed on instead), and the run would not show e-mail's retry."""
        if self.relay is None or self.stop_chaos.is_set():
            return False
        if self.relay_back_at is None:
            return True
        states = db_retry(self._acknowledgement_states)
        return bool(states.get("approved") or states.get("submitted"))

    def _notices(self):
        from ledger.models import Action, Operation

        return Operation.objects.filter(enquiry__source=SOURCE, action=Action.SEND_NOTICE)

    def _acknowledgements(self):
        from ledger import notices

        return self._notices().filter(payload__template=notices.ACKNOWLEDGEMENT)

    def _acknowledgement_states(self) -> dict:
        from django.db.models import Count

        rows = self._acknowledgements().values("state").annotate(n=Count("pk"))
        return {row["state"]: row["n"] for row in rows}

    def count_relay(self) -> dict:
        from ledger import notices
        from ledger.models import JournalEntry, OperationState

        by_id = self.relay.stats()["by_message_id"]
        acks = list(self._acknowledgements().values_list("idempotency_key", "state"))
        ack_ids = [notices.message_id(key) for key, _state in acks]
        notice_pks = [str(pk) for pk in self._notices().values_list("pk", flat=True)]
        people = (
            JournalEntry.objects.filter(subject_id__in=notice_pks)
            .exclude(actor__startswith="system:")
            .count()
        )
        resident_messages = self._notices().exclude(payload__template=notices.OPERATOR_DIGEST)
        return {
            "relay_down_seconds": self.args.relay_down,
            "relay_refused_for_seconds": round(self.relay_back_at or 0.0, 1),
            "acknowledgements_by_state_when_back": self.states_when_back,
            "acknowledgements": len(acks),
            "acknowledgements_confirmed": sum(s == OperationState.CONFIRMED for _k, s in acks),
            "acknowledgements_at_relay": sum(1 for m in ack_ids if by_id.get(m, 0) >= 1),
            "acknowledgements_cancelled": sum(s == OperationState.CANCELLED for _k, s in acks),
            "resident_messages_confirmed": resident_messages.filter(
                state=OperationState.CONFIRMED
            ).count(),
            "relay_messages": sum(by_id.values()),
            "relay_duplicates": sum(count - 1 for count in by_id.values() if count > 1),
            "people_involved": people,
        }
