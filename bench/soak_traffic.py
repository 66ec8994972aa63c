"""The soak's traffic: the senders (every event, a share of them again, some copies at the same
moment) and the reviewer who approves what reaches review."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from bench.soak_common import SOURCE, close_thread_connection, db_retry


class Traffic:
    """Mixed into bench.soak.Soak, which holds the run's state."""

    # -- senders -------------------------------------------------------------------------------

    def deliver(self, session, event_id: str, body: bytes) -> int:
        from intake.signing import sign

        for attempt in range(60):
            timestamp = int(time.time())
            headers = {
                "webhook-id": event_id,
                "webhook-timestamp": str(timestamp),
                "webhook-signature": sign(self.secret, event_id, timestamp, body),
                "Content-Type": "application/json",
                "X-Forwarded-Proto": "https",
            }
            with self.lock:
                self.events_sent += 1
            try:
                response = session.post(
                    f"{self.web.url}/intake/events/{SOURCE}/",
                    data=body,
                    headers=headers,
                    timeout=30,
                )
            except Exception:  # connection refused or reset: a sender retries
                time.sleep(min(2.0, 0.1 * (attempt + 1)))
                continue
            if response.status_code in (200, 202):
                with self.lock:
                    self.accepted[event_id] = response.json().get("reference", "")
                return response.status_code
            if response.status_code < 500:
                with self.lock:
                    self.refused.append(f"{event_id}: {response.status_code}")
                return response.status_code
            time.sleep(min(2.0, 0.1 * (attempt + 1)))  # 5xx (the database restarting): again
        return 0

    def send_all(self):
        import requests

        from harness.webdav.documents import form_pdf

        n = self.args.events
        events = []
        for i in range(n):
            payload = {
                "name": f"Soak Resident {i}",
                "email": f"resident{i}@example.org",
                "subject": "Missed bin collection",
                "message": f"Soak event {i}: my bin was not emptied this week.",
                "consent": True,
            }
            if self.documents is not None:
                name = f"soak-{os.getpid()}-{i}.pdf"
                fields = {"permit": f"P-{i}", "resident": f"Soak Resident {i}"}
                version = self.documents.put(name, form_pdf(fields))
                self.expected_documents[name] = fields
                payload["documents"] = [{"id": name, "version": version}]
            events.append((f"soak-{os.getpid()}-{i}", json.dumps(payload).encode()))
        local = threading.local()

        def fresh():
            new = requests.Session()
            new.trust_env = False  # straight to the local server, never a proxy
            return new

        def session():
            if not hasattr(local, "session"):
                local.session = fresh()
            return local.session

        def one(item):
            event_id, body = item
            self.deliver(session(), event_id, body)
            if self.rng.random() < self.args.duplicate_rate:
                copies = self.rng.choice([1, 1, 2, 3])
                if copies == 1:
                    self.deliver(session(), event_id, body)
                else:  # several copies at the same moment
                    with ThreadPoolExecutor(max_workers=copies) as burst:
                        list(
                            burst.map(
                                lambda _: self.deliver(fresh(), event_id, body),
                                range(copies),
                            )
                        )

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(one, events))
        self.stop_sending.set()

    # -- the reviewer ----------------------------------------------------------------------------

    def approve_loop(self):
        from intake.models import Enquiry, EnquiryState
        from ledger.services import ActionRefused, approve_revision, request_slots

        try:
            while True:
                if self.reviewers_wait_for_relay():
                    time.sleep(0.2)
                    continue
                done_sending = self.stop_sending.is_set()
                ready = db_retry(
                    lambda: list(
                        Enquiry.objects.filter(
                            source=SOURCE, state=EnquiryState.READY_FOR_REVIEW
                        ).values_list("pk", flat=True)[:200]
                    )
                )
                for pk in ready:
                    if self.calendar is not None:
                        # The reviewer looks at the slots first: a read for a worker.
                        db_retry(
                            lambda pk=pk: request_slots(
                                pk, actor=self.reviewer, reason="soak: slots for review"
                            )
                        )
                        self.slots_asked += 1
                    try:
                        db_retry(lambda pk=pk: self.file_under_a_category(pk))
                        db_retry(
                            lambda pk=pk: approve_revision(
                                pk, actor=self.reviewer, reason="soak: approve"
                            )
                        )
                        self.approved += 1
                    except ActionRefused:
                        pass
                if (
                    self.stop_chaos.is_set()
                    and done_sending
                    and not ready
                    and self.quiet_for_approval()
                ):
                    return
                time.sleep(0.2)
        finally:
            close_thread_connection()

    @staticmethod
    def file_under_a_category(pk) -> None:
        """The CRM requires a category before an approval (ledger.kinds): a revision the
        classifier left without one is filed under the soak's, as a reviewer would."""
        from intake.models import Category, Enquiry, Revision

        category, _ = Category.objects.get_or_create(slug="waste", defaults={"name": "Bins"})
        current = Enquiry.objects.filter(pk=pk).values_list("current_revision", flat=True).first()
        Revision.objects.filter(enquiry_id=pk, number=current, category__isnull=True).update(
            category=category
        )

    def quiet_for_approval(self) -> bool:
        from intake.models import Enquiry, EnquiryState

        waiting = db_retry(
            lambda: Enquiry.objects.filter(
                source=SOURCE,
                state__in=[
                    EnquiryState.RECEIVED,
                    EnquiryState.VALIDATED,
                    EnquiryState.READY_FOR_REVIEW,
                ],
            ).exists()
        )
        return not waiting
