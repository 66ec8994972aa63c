"""The work the ledger proposes itself (below ledger.execution, which proposes a document's
new version, and above the policies): an operation recorded (and, when the policy needs no
review, approved and enqueued), the receipt's work, and the answers to intake's signals."""

from __future__ import annotations

import hashlib

from django.utils import timezone

from intake import residentlink
from intake.models import Document
from intake.visible import has_visible_text
from intake.workflow import system_actor
from ledger import journal, notices, wording
from ledger.integrations import ensure_integrations
from ledger.models import Action, Integration, Operation, OperationState, payload_hash
from ledger.policies import policy_for
from ledger.queueing import EXECUTE, batched, enqueue
from ledger.queueing import RECONCILE as RECONCILE_TASK

LEDGER = system_actor("ledger")
BY_POLICY = "approved by policy (no review needed)"


def integration(name) -> Integration:
    try:
        return Integration.objects.get(name=name)
    except Integration.DoesNotExist:
        return ensure_integrations()[name]


def _operation_key(enquiry, action, revision, detail="") -> str:
    """The operation's idempotency key. ``detail`` comes from the sender (a document's id and
    version, up to 282 characters by docs/intake.md): when the whole key would not fit the
    column, the detail is replaced by its digest, so every key fits whatever was sent. Keys
    that fit are written as they always were (stored operations are found by them)."""
    if not detail:
        return Operation.make_key(enquiry.pk, action, revision)
    key = f"{enquiry.pk}:{action}:{detail}:r{revision}"
    if len(key) <= Operation.KEY_MAX_LENGTH:
        return key
    digest = hashlib.sha256(detail.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{enquiry.pk}:{action}:sha256-{digest}:r{revision}"


def _operation_fields(enquiry, action, payload, revision, integrations=None) -> dict:
    policy = policy_for(action)
    name = policy.integration
    if not name:
        target = None
    elif integrations is not None and name in integrations:
        target = integrations[name]
    else:
        target = integration(name)
    return {
        "enquiry": enquiry,
        "action": action,
        "revision": revision,
        "payload": payload,
        "payload_hash": payload_hash(payload),
        "integration": target,
    }


def _journal_proposed(op, *, actor, reason):
    journal.record(
        op,
        "ledger.operation.proposed",
        actor=actor,
        reason=reason or f"{op.action} for revision {op.revision}",
        evidence={"idempotency_key": op.idempotency_key, "payload_hash": op.payload_hash},
        to_state=OperationState.PROPOSED,
    )


def propose(
    enquiry,
    action,
    payload,
    *,
    revision,
    actor,
    detail="",
    approve=False,
    reason="",
):
    """Record an operation (idempotent on its key); a system-approved one is approved and
    enqueued at once. Returns (operation, created)."""
    key = _operation_key(enquiry, action, revision, detail)
    defaults = _operation_fields(enquiry, action, payload, revision)
    op, created = Operation.objects.get_or_create(idempotency_key=key, defaults=defaults)
    if created:
        _journal_proposed(op, actor=actor, reason=reason)
    if approve and op.state == OperationState.PROPOSED:
        approve_proposed(op, actor=actor, reason=reason or BY_POLICY)
    return op, created


def approve_proposed(op, *, actor, reason, save=True):
    """Approve ``op`` and enqueue it (or hold it: its integration is paused). ``save=False``:
    the caller inserts the new row itself (the receipt's bulk insert)."""
    op.approve(actor=actor, reason=reason, evidence={"payload_hash": op.payload_hash})
    if op.integration is not None and op.integration.paused:
        op.held = True
    if not op.held:
        # The task row and this save are one transaction; the save records task_enqueued_at.
        enqueue(op, EXECUTE, save=False)
    if save:
        op.save()
    if op.held:
        journal.record(
            op, "ledger.operation.held", actor=actor, reason=f"{op.integration} is paused"
        )


def crm_payload(enquiry, revision) -> dict:
    """What the CRM receives for an approved revision: the reference and the reviewed fields,
    and the fields read from attached forms (a reviewer's correction in place of what was
    read) when there are any."""
    payload = {
        "reference": enquiry.reference,
        "revision": revision.number,
        "category": revision.category.slug if revision.category_id else None,
        "source": enquiry.source,
        "fields": revision.fields,
    }
    documents = [
        {"id": d.document_id, "version": d.version, "fields": d.fields}
        for d in Document.objects.filter(enquiry=enquiry).order_by("document_id", "version")
        if d.fields
    ]
    if documents:
        payload["documents"] = documents
    return payload


def notice_payload(template, to, **values) -> dict:
    """A notify.send payload: the address, the template, its values, and the text as rendered
    now (``body``: what a destination speaking Handover's contract sends; an e-mail relay gets
    the template's text and HTML, rendered from the same values)."""
    payload = {"to": to, "template": template, **values}
    payload["body"] = notices.render(template, payload)[1]
    return payload


def acknowledgement_payload(enquiry) -> dict:
    # Receipt is not delivery: the resident is told we *received* it, never that it was reviewed.
    return wording.resident_payload(wording.RECEIVED, enquiry)


# What a resident-visible transition sends (ledger.receivers): the message's kind and why.
RESIDENT_REASONS = {
    wording.NEEDS_INFORMATION: "tell the resident what information is needed",
    wording.PASSED_ON: "tell the resident their enquiry has been passed on",
    wording.NOT_TAKEN_FORWARD: "tell the resident their enquiry will not be taken forward",
    wording.CLOSED: "tell the resident their enquiry has been closed",
}
NO_ADDRESS = "no e-mail address: the resident gave none, so nothing can be sent"
NO_MESSAGE = "no message to the resident was written, so nothing is sent"
SENDS_NOTHING = "the category “%(category)s” is set to send residents nothing"


def propose_resident_message(enquiry, kind, *, revision, detail=None, actor=LEDGER, **values):
    """The message a resident-visible transition owes the resident, as its own notify.send
    operation approved by policy and enqueued in the caller's transaction (key
    ``<enquiry>:notify.send:<kind>:r<revision>``: proposed twice, it is one message). When it
    cannot be sent the enquiry's journal says why (``ledger.resident_message.not_sent``) and
    None is returned."""
    why = ""
    if not enquiry.email:
        why = NO_ADDRESS
    elif enquiry.category_id is not None and not enquiry.category.tells_resident:
        # Read only where a message could go: the category is a query of its own.
        why = SENDS_NOTHING % {"category": enquiry.category.name}
    elif "message_to_resident" in wording.KINDS[kind].required and not has_visible_text(
        values.get("message_to_resident") or ""
    ):
        why = NO_MESSAGE
    if why:
        journal.record(
            enquiry,
            "ledger.resident_message.not_sent",
            actor=actor,
            reason=why,
            evidence={"template": kind, "revision": revision},
        )
        return None
    op, _ = propose(
        enquiry,
        Action.SEND_NOTICE,
        wording.resident_payload(kind, enquiry, **values),
        revision=revision,
        actor=actor,
        detail=detail or kind,
        approve=True,
        reason=RESIDENT_REASONS.get(kind, ""),
    )
    return op


def propose_new_link(enquiry, *, link, actor=LEDGER):
    """A resident whose link expired asked for a new one: the message to the address on file,
    its own notify.send operation (one per request, numbered). Inside the caller's
    transaction, with the enquiry locked. None when there is no address on file."""
    if not enquiry.email:
        return None
    template = notices.RESIDENT_LINK
    earlier = Operation.objects.filter(
        enquiry=enquiry, action=Action.SEND_NOTICE, payload__template=template
    ).count()
    payload = notice_payload(
        template,
        enquiry.email,
        reference=enquiry.reference,
        answer_link=link,
        days=residentlink.link_days(),
    )
    op, _ = propose(
        enquiry,
        Action.SEND_NOTICE,
        payload,
        revision=enquiry.current_revision,
        actor=actor,
        detail=f"{template}-{earlier + 1}",
        approve=True,
        reason="the resident asked for a new link to their enquiry's page",
    )
    return op


def propose_information_request(enquiry, *, message_to_resident, actor=LEDGER):
    """A reviewer moved the enquiry to needs_information: tell the resident what is needed (the
    reviewer's message to the resident, never the journal reason), one message per request.
    Inside the caller's transaction, with the enquiry locked."""
    kind = wording.NEEDS_INFORMATION
    earlier = Operation.objects.filter(
        enquiry=enquiry, action=Action.SEND_NOTICE, payload__template=kind
    ).count()
    return propose_resident_message(
        enquiry,
        kind,
        revision=enquiry.current_revision,
        detail=f"{kind}-{earlier + 1}",
        actor=actor,
        message_to_resident=message_to_resident,
    )


def propose_message(key, payload, *, actor=LEDGER, reason="", at=None) -> tuple[Operation, bool]:
    """A notify.send operation that belongs to no enquiry (a message to an operator), approved by
    policy and enqueued in the caller's transaction; idempotent on ``key``. ``at``: when it was
    made (the caller's clock), default now."""
    op, created = Operation.objects.get_or_create(
        idempotency_key=key,
        defaults={
            "created_at": at or timezone.now(),
            "enquiry": None,
            "action": Action.SEND_NOTICE,
            "revision": 1,
            "payload": payload,
            "payload_hash": payload_hash(payload),
            "integration": integration(Integration.NOTIFY),
        },
    )
    if created:
        _journal_proposed(op, actor=actor, reason=reason)
        approve_proposed(op, actor=actor, reason=BY_POLICY)
    return op, created


# --- intake's signals ---------------------------------------------------------------------------


def _receipt_specs(enquiry, documents):
    """(action, payload, revision, detail, reason) for each piece of receipt work."""
    revision = enquiry.current_revision
    specs = [(Action.SUGGEST_CATEGORY, {}, revision, "", "")]
    for document in documents:
        specs.append(
            (
                Action.EXTRACT_DOCUMENT,
                extraction_payload(document),
                revision,
                extraction_detail(document),
                "",
            )
        )
    if enquiry.email:
        specs.append(
            (
                Action.SEND_NOTICE,
                acknowledgement_payload(enquiry),
                1,
                wording.RECEIVED,
                "acknowledge receipt",
            )
        )
    return specs


def propose_receipt_work(enquiry, *, actor=LEDGER):
    """The receipt's work: the suggestion, one extraction per attached document, the
    acknowledgement, all system-approved and enqueued in the caller's transaction.

    Called by the receipt's task (ledger.receipt), never inside the intake request. The keys
    the enquiry already holds are read first and an existing operation is returned as it is;
    the new ones are the rows propose() writes (each operation proposed, then approved through
    its transition, journalled and enqueued), inserted in one statement per table instead of
    one per row (docs/benchmarks.md).
    """
    documents = _attached_documents(enquiry)
    specs = _receipt_specs(enquiry, documents)
    known = set(Operation.objects.filter(enquiry=enquiry).values_list("idempotency_key", flat=True))
    names = {policy_for(spec[0]).integration for spec in specs} - {None, ""}
    integrations = Integration.objects.in_bulk(names, field_name="name") if names else {}
    ops, fresh = [], []
    with journal.deferred(), batched():
        for action, payload, revision, detail, reason in specs:
            key = _operation_key(enquiry, action, revision, detail)
            if key in known:
                op, _ = propose(
                    enquiry,
                    action,
                    payload,
                    revision=revision,
                    detail=detail,
                    actor=actor,
                    approve=True,
                    reason=reason,
                )
            else:
                fields = _operation_fields(enquiry, action, payload, revision, integrations)
                op = Operation(idempotency_key=key, **fields)
                _journal_proposed(op, actor=actor, reason=reason)
                approve_proposed(op, actor=actor, reason=reason or BY_POLICY, save=False)
                fresh.append(op)
            ops.append(op)
        if not enquiry.email and not known:
            journal.record(
                enquiry,
                "ledger.resident_message.not_sent",
                actor=actor,
                reason=NO_ADDRESS,
                evidence={"template": wording.RECEIVED, "revision": 1},
            )
        # Inside the block: the operations go in before their journal and task rows.
        Operation.objects.bulk_create(fresh)
    for op in fresh:
        # As save() does: the row now holds "approved", the state a later save() checks for.
        op._update_initial_state()
    return ops


def extraction_payload(document) -> dict:
    return {"document_id": document.document_id, "version": document.version}


def extraction_detail(document) -> str:
    """The extraction's part of its key: the document and its version (one place)."""
    return f"{document.document_id}@v{document.version}"


def propose_extraction(enquiry, document, *, actor=LEDGER, reason=""):
    """Read ``document`` (one version) for the enquiry's current revision: a read, approved by
    policy and enqueued in the caller's transaction. Returns (operation, created); an
    operation already under the key is returned as it is."""
    return propose(
        enquiry,
        Action.EXTRACT_DOCUMENT,
        extraction_payload(document),
        revision=enquiry.current_revision,
        detail=extraction_detail(document),
        actor=actor,
        approve=True,
        reason=reason,
    )


def _attached_documents(enquiry):
    documents = list(Document.objects.filter(enquiry=enquiry))
    if documents:
        return documents
    for item in enquiry.documents or []:
        if isinstance(item, dict):
            doc_id = str(item.get("id") or item.get("document_id") or "").strip()
            version = str(item.get("version") or "").strip()
        else:
            doc_id, version = str(item).strip(), ""
        if doc_id:
            document, _ = Document.objects.get_or_create(
                enquiry=enquiry, document_id=doc_id, version=version
            )
            documents.append(document)
    return documents


def supersede_revision(enquiry, new_revision, *, actor=LEDGER):
    """Revision N+1 exists: the approval of N does not carry over; its CRM write is cancelled
    and a new one proposed for N+1 (approved only by a reviewer's approve_revision)."""
    number = new_revision.number
    stale = Operation.objects.select_for_update().filter(
        enquiry=enquiry,
        action=Action.CREATE_ENQUIRY,
        revision__lt=number,
        state__in=[OperationState.PROPOSED, OperationState.APPROVED, OperationState.FAILED],
    )
    for op in stale:
        op.held = False
        op.cancel(
            actor=actor,
            reason=f"superseded by revision {number}",
            evidence={"revision": op.revision, "superseded_by": number},
        )
        op.save()
    propose(
        enquiry,
        Action.CREATE_ENQUIRY,
        crm_payload(enquiry, new_revision),
        revision=number,
        actor=actor,
        reason=f"revision {number} made; waits for a reviewer's approval",
    )


def nudge_enquiry(enquiry, *, actor=LEDGER, reason="event delivered again"):
    """A repeated delivery: reconcile stuck work now. Never restarts it, never adds work."""
    nudged = []
    now = timezone.now()
    for op in Operation.objects.filter(enquiry=enquiry, state=OperationState.UNKNOWN, attention=""):
        if op.lease_expires_at and op.lease_expires_at > now:
            continue  # someone is looking right now
        op.next_attempt_at = None
        op.save(update_fields=["next_attempt_at", "updated_at"])
        enqueue(op, RECONCILE_TASK)
        journal.record(op, "ledger.operation.nudged", actor=actor, reason=reason)
        nudged.append(op)
    return nudged
