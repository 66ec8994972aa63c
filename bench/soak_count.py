"""The soak's reckoning: wait until nothing is in flight, then count what was lost, duplicated
or left stuck out of sight, from the database and the destination's own records."""

from __future__ import annotations

import time

from bench.soak_common import SOURCE, db_retry


class Accounting:
    """Mixed into bench.soak.Soak, which holds the run's state."""

    def busy_operations(self):
        from django.db.models import Q

        from ledger.models import Operation, OperationState

        return Operation.objects.filter(enquiry__source=SOURCE).filter(
            Q(state=OperationState.APPROVED, held=False)
            | Q(state=OperationState.SUBMITTED)
            | Q(state=OperationState.UNKNOWN, attention="")
        )

    def wait_for_quiescence(self, timeout: float) -> bool:
        from ledger.sweeper import sweep

        deadline = time.monotonic() + timeout
        last_sweep = 0.0
        while time.monotonic() < deadline:
            busy = db_retry(lambda: self.busy_operations().count())
            if not busy and self.quiet_for_approval():
                return True
            if not self.cluster.running:
                self.restart_cluster()
            # What a scheduled sweep would find, found sooner (manage.py recover does the same).
            if time.monotonic() - last_sweep > 5:
                db_retry(lambda: sweep(actor="system:soak"))
                last_sweep = time.monotonic()
            time.sleep(0.5)
        return False

    def count_reads(self, owned, invisible) -> dict:
        """Every appointment read confirmed (with an as-of), or failed and owned in the queue;
        the calendar holding exactly its seeded events (a read never writes)."""
        from ledger.models import Operation, OperationState

        reads = Operation.objects.filter(enquiry__source=SOURCE, action="appointments.read")
        states = {}
        for op in reads.select_related("enquiry"):
            states[op.state] = states.get(op.state, 0) + 1
            if op.state == OperationState.CONFIRMED and not op.result.get("as_of"):
                invisible.append(f"{op.enquiry.reference}: a read confirmed without an as-of")
            elif op.state in (OperationState.FAILED, OperationState.UNKNOWN) and not owned(
                "operation", op.pk
            ):
                invisible.append(f"{op.enquiry.reference}: read {op.state} with no owner")
        held = self.calendar.records()
        if held != self.calendar_events:
            invisible.append(f"the calendar holds {held} events, seeded {self.calendar_events}")
        return {
            "appointment_reads": {"asked": self.slots_asked, **states},
            "calendar_events": {"seeded": self.calendar_events, "held": held},
            "calendar_proxy": self.calendar.proxy.stats()["targets"],
        }

    def count(self, seconds: float, quiet: bool) -> dict:
        from intake.models import Enquiry, IntakeEvent
        from ledger.models import Operation, OperationState
        from recovery.queue import all_rows

        stats = self.sandbox.stats()
        events = {e.event_id: e for e in IntakeEvent.objects.filter(source=SOURCE)}
        enquiries = {e.pk: e for e in Enquiry.objects.filter(source=SOURCE)}
        soak_refs = {e.reference for e in enquiries.values()}
        extra = {}
        if self.crm is None:
            by_reference = stats["crm"]["by_reference"]
        else:
            # Counted at BottleCRM, by the kind's own look-up, one reference at a time.
            by_reference = {ref: self.crm.records(ref) for ref in sorted(soak_refs)}
            in_org = self.bottlecrm.count_all_cases()
            extra = {
                "destination": self.crm.as_dict(),
                "cases_in_bottlecrm": in_org,
                "cases_without_soak_reference": in_org - sum(by_reference.values()),
                "proxy": self.crm.proxy.stats()["targets"],
            }
        lost = []
        for event_id in self.accepted:
            event = events.get(event_id)
            if event is None or event.enquiry_id is None:
                lost.append(f"accepted event {event_id} has no enquiry")
        queue = {}
        for row in all_rows():
            queue[(row["q_kind"], str(row["q_key"]))] = row["q_owner"]

        def owned(kind, key) -> bool:
            return queue.get((kind, str(key))) is not None

        visible, invisible = [], []
        crm_ops = Operation.objects.filter(
            enquiry__source=SOURCE, action="crm.create_enquiry"
        ).exclude(state__in=[OperationState.PROPOSED, OperationState.CANCELLED])
        approved_enquiries = set()
        for op in crm_ops.select_related("enquiry"):
            enquiry = op.enquiry
            approved_enquiries.add(enquiry.pk)
            records = by_reference.get(enquiry.reference, 0)
            if op.state == OperationState.CONFIRMED and records == 1:
                continue
            if op.state == OperationState.CONFIRMED and records == 0:
                lost.append(f"{enquiry.reference}: confirmed but no destination record")
            elif owned("operation", op.pk) or owned("enquiry", enquiry.reference):
                visible.append(f"{enquiry.reference}: {op.state} {op.attention}")
            elif records > 1:
                pass  # counted as duplicate_records below
            elif op.state in (OperationState.FAILED, OperationState.UNKNOWN):
                invisible.append(f"{enquiry.reference}: {op.state} in the queue without owner")
            else:
                invisible.append(f"{enquiry.reference}: {op.state} {op.attention}")
        stuck = [
            f"{op.enquiry.reference} {op.action}: {op.state}"
            for op in self.busy_operations().select_related("enquiry")
            if op.action != "crm.create_enquiry"
        ]
        invisible += stuck
        not_approved = [
            e.reference
            for pk, e in enquiries.items()
            if pk not in approved_enquiries and e.state not in ("rejected",)
        ]
        # A receipt no worker took up (ledger.receipt) leaves its enquiry short of approval too;
        # said as such, so the count names the cause.
        pending = {e.reference for e in enquiries.values() if e.receipt_pending}
        invisible += [f"{ref}: receipt never taken up" for ref in sorted(pending)]
        invisible += [
            f"{ref}: never reached approval" for ref in not_approved if ref not in pending
        ]
        if self.calendar is not None:
            extra.update(self.count_reads(owned, invisible))
        if self.documents is not None:
            extra.update(self.count_documents(owned))
        duplicates = sum(n - 1 for ref, n in by_reference.items() if ref in soak_refs and n > 1)
        records = sum(n for ref, n in by_reference.items() if ref in soak_refs)
        if extra.get("cases_without_soak_reference"):
            invisible.append(
                f"{extra['cases_without_soak_reference']} case(s) in BottleCRM carry no soak "
                "reference: no look-up would ever find them"
            )
        documents = {
            key: extra.pop(key)
            for key in ("documents_lost", "documents_invisible", "documents_duplicated")
            if key in extra
        }
        return {
            "destination": self.args.destination,
            **documents,
            "events_sent": self.events_sent,
            "distinct_events": self.args.events,
            "enquiries": len(enquiries),
            "destination_records": records,
            "duplicate_records": duplicates,
            "lost": len(lost),
            "unresolved_visible": len(visible),
            "unresolved_invisible": len(invisible),
            "worker_kills": self.worker_kills,
            "db_restarts": self.db_restarts,
            "seconds": round(seconds, 1),
            "details": {
                "accepted_events": len(self.accepted),
                "stored_events": len(events),
                "refused_deliveries": self.refused[:20],
                "approved_enquiries": len(approved_enquiries),
                "confirmed_crm_writes": crm_ops.filter(state=OperationState.CONFIRMED).count(),
                "faults_armed": self.faults_armed,
                "fault_loop_turns": self.fault_loop_turns,
                "fault_errors": self.fault_errors[:5],
                "faults_fired": stats["faults_fired"],
                "requests": stats["requests"],
                "cluster_deaths": self.cluster_deaths,
                "db_restart": self.db_restart_note,
                "quiescent": quiet,
                "lost": lost[:20],
                "unresolved_visible": visible[:20],
                "unresolved_invisible": invisible[:20],
                "logs": str(self.dir),
                **extra,
            },
        }

    def count_documents(self, owned) -> dict:
        """Each attached form: read with exactly the fields the share holds for it, or failed
        in the queue with an owner. Other fields are lost (made up or another's); neither is
        invisible; two reads of one version confirmed for one revision are duplicated."""
        from django.db.models import Count

        from intake.models import Document
        from ledger.models import Operation, OperationState

        lost, invisible, read, visible = [], [], 0, 0
        documents = Document.objects.filter(enquiry__source=SOURCE).select_related("enquiry")
        by_name = {d.document_id: d for d in documents}
        for name, fields in self.expected_documents.items():
            document = by_name.get(name)
            if document is None:
                continue  # its event was never accepted: counted with the events
            held = self.documents.fields_held(name)
            if document.status == "extracted":
                if document.extracted == fields == held:
                    read += 1
                else:
                    lost.append(f"{name}: read {document.extracted}, the share holds {held}")
                continue
            ops = Operation.objects.filter(
                enquiry=document.enquiry, action="documents.extract", payload__document_id=name
            )
            if document.status != "pending" and any(owned("operation", op.pk) for op in ops):
                visible += 1
            else:
                states = [f"{op.state} {op.attention}" for op in ops]
                invisible.append(f"{name}: {document.status}, reads {states}")
        duplicated = (
            Operation.objects.filter(
                enquiry__source=SOURCE, action="documents.extract", state=OperationState.CONFIRMED
            )
            .values("enquiry", "revision", "payload__document_id")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .count()
        )
        return {
            "documents_lost": len(lost),
            "documents_invisible": len(invisible),
            "documents_duplicated": duplicated,
            "documents": {
                "attached": len(self.expected_documents),
                "read_as_held": read,
                "failed_visible": visible,
                "lost": lost[:20],
                "invisible": invisible[:20],
                "proxy": self.documents.proxy.stats()["targets"],
            },
        }
