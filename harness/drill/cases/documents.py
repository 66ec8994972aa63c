"""The drill's document cases, against a real WebDAV server (WsgiDAV) behind the fault proxy
(harness.drill.documents): access removed, the document changed between reads, a timeout, a
reviewer's correction kept across reprocessing. Each checks the ledger, the document rows and
what the server holds (its folder, and the reads that reached it)."""

from __future__ import annotations

from harness.drill.cases.steps import CLEANUP, CLEANUP_FOR_RESIDENT
from harness.drill.results import CaseFailed, CaseResult
from harness.drill.runner import ACTOR, Drill
from harness.webdav.documents import form_pdf
from intake.documents import correct_document_field
from intake.models import Document, EnquiryState
from intake.services import reject_enquiry
from ledger.models import Action, Operation, OperationState
from ledger.services import cancel_operation, reprocess_document

FINAL = (OperationState.CONFIRMED, OperationState.FAILED, OperationState.CANCELLED)


def _attach(d: Drill, case: CaseResult, name: str, fields: dict, *, change_to=None):
    """Put a form on the share, send an event attaching its version (after, with ``change_to``,
    replacing it on the share: changed between the sender's read and Handover's), wait for
    every read; (enquiry, document, version)."""
    name = f"drill-{d.run_id}-{name}.pdf"
    version = d.documents.put(name, form_pdf(fields))
    if change_to is not None:
        d.documents.put(name, form_pdf(change_to))
    enquiry = d.send(case, documents=[{"id": name, "version": version}])
    d.wait_enquiry(enquiry, EnquiryState.READY_FOR_REVIEW)
    d.wait(
        lambda: (
            not Operation.objects.filter(enquiry=enquiry, action=Action.EXTRACT_DOCUMENT)
            .exclude(state__in=FINAL)
            .exists()
        ),
        "the document reads",
    )
    d.settle(enquiry)
    document = Document.objects.filter(enquiry=enquiry, document_id=name, version=version).first()
    if document is None:
        raise CaseFailed(f"no document row for {name} version {version}")
    return enquiry, document, version


def _read_of(enquiry, version):
    return Operation.objects.get(
        enquiry=enquiry, action=Action.EXTRACT_DOCUMENT, payload__version=version
    )


def _clean_up(d: Drill, enquiry, *ops):
    for op in ops:
        if op.state == OperationState.FAILED:
            cancel_operation(op.pk, actor=ACTOR, reason=CLEANUP)
    enquiry.refresh_from_db()
    if enquiry.state == EnquiryState.READY_FOR_REVIEW:
        reject_enquiry(
            enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
        )


def document_access_removed(d: Drill, case: CaseResult):
    d.documents.remove_access()  # the share's owner changed its credentials
    before = d.documents.reads()
    enquiry, document, version = _attach(d, case, "access", {"permit": "DRILL-PERMIT-1"})
    op = _read_of(enquiry, version)
    reads = d.documents.reads() - before
    revision = enquiry.revisions.order_by("-number").first()
    queue = d.queue_row("operation", op.pk)
    held = d.documents.fields_held(document.document_id)
    case.note(
        f"read {op.state} ({op.attention}, {op.last_error_status}); document {document.status}, "
        f"extracted {document.extracted}; {reads} read(s) at the server; revision "
        f"r{revision.number}; queue: {queue}; the server holds {held}"
    )
    case.check(
        op.state == OperationState.FAILED and op.attention == "access_denied", "an access failure"
    )
    case.check(op.last_error_status == 401, "WsgiDAV refused the credentials", op.last_error_status)
    case.check(reads == 1, "asked once, not retried", reads)
    case.check(document.status == "access_denied", "the document marked access removed")
    case.check(document.extracted == {} and not document.text, "no invented fields")
    case.check(revision.number == 1, "the revision is untouched", revision.number)
    case.check(queue == "failed", "visible in the queue", queue)
    case.check(held == {"permit": "DRILL-PERMIT-1"}, "the document is still on the server", held)
    d.documents.restore_access()
    _clean_up(d, enquiry, op)


def document_changed(d: Drill, case: CaseResult):
    before = d.documents.reads()
    enquiry, document, version = _attach(
        d, case, "changed", {"permit": "P-1"}, change_to={"permit": "P-1-AMENDED", "page": "2"}
    )
    old = _read_of(enquiry, version)
    new = Document.objects.exclude(pk=document.pk).filter(enquiry=enquiry).first()
    reads = d.documents.reads() - before
    held = d.documents.fields_held(document.document_id)
    case.note(
        f"version {version}: read {old.state} ({old.attention}), document {document.status}; "
        f"new version {new.version if new else None}: {new.status if new else None} "
        f"{new.extracted if new else None}; {reads} read(s) at the server; it holds {held}"
    )
    case.check(old.attention == "document_changed", "412: the document changed", old.attention)
    case.check(document.extracted == {}, "the old version's fields are not made up")
    case.check(new is not None, "the version there now is attached as a new version")
    if new is not None:
        case.check(new.extracted == held, "the new version's fields, as the server holds them")
    case.check(reads == 2, "one read per version", reads)
    _clean_up(d, enquiry, old)


def document_timeout(d: Drill, case: CaseResult):
    d.documents.fault("hold", count=1, delay_ms=4000)  # past the integration's 1 s timeout
    enquiry, document, version = _attach(d, case, "timeout", {"permit": "P-2"})
    op = _read_of(enquiry, version)
    attempts = [a.error_class or a.outcome for a in op.attempts.order_by("number")]
    case.note(f"read {op.state}; attempts {attempts}; document {document.status}")
    case.check(op.state == OperationState.CONFIRMED, "read on the next attempt", op.state)
    case.check(attempts[:1] == ["transient"], "the timeout was a transient read", attempts)
    case.check(len(attempts) <= op.integration.retry_budget, "within the budget", attempts)
    case.check(document.extracted == {"permit": "P-2"}, "the fields read", document.extracted)
    _clean_up(d, enquiry, op)


def document_correction_kept(d: Drill, case: CaseResult):
    enquiry, document, _ = _attach(d, case, "corrected", {"permit": "P-3", "ward": "Nrth"})
    correct_document_field(
        document.pk,
        actor=d.editor,
        reason="drill: the form says North",
        field="ward",
        value="North",
    )
    before = d.documents.reads()
    op = reprocess_document(document.pk, actor=d.reviewer, reason="drill: read it again")
    op = d.wait_operation(op, lambda o: o.state in FINAL, "the second read")
    document.refresh_from_db()
    reads = d.documents.reads() - before
    held = d.documents.fields_held(document.document_id)
    case.note(
        f"second read r{op.revision} {op.state}; {reads} read at the server; extracted "
        f"{document.extracted}; corrected {document.corrected}; the server holds {held}"
    )
    case.check(
        op.state == OperationState.CONFIRMED and reads == 1, "the same version read again", reads
    )
    case.check(document.extracted == held, "the same result as the first read")
    case.check(document.fields["ward"] == "North", "the correction kept", document.fields)
    _clean_up(d, enquiry, op)
