"""A document's card on the review page: correct a field read from it, or read it again.

POST only, a required reason, the reviewer's permission; refused -> the review page again with
the card's form open and what was typed (422 a bad field, 409 not possible now); done -> the
review page at the document's card, the message shown there.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

import recovery.messages
from intake.documents import REVISABLE, correct_document_field
from intake.models import Document
from ledger import http
from ledger import services as ledger_services
from ledger.connectors.base import ConnectorError
from ledger.kinds import WEBDAV
from ledger.models import Integration
from recovery.forms import DocumentCorrectionForm, ReasonForm
from recovery.views.common import REFUSALS, console_view, get_enquiry_for_user, log, require

REVIEW = "intake.review_enquiry"
STATUS_LABELS = {
    "pending": "not read yet",
    "extracted": "read",
    "access_denied": "access removed",
    "changed": "changed on the server",
    "failed": "could not be read",
}


def document_link(document, integration) -> str:
    """Where the reviewer opens this version: the document's URL at the store, without any
    credentials the configured address may carry; "" when it cannot be made."""
    if integration is None:
        return ""
    try:
        if integration.kind == WEBDAV:
            path = http.path(document.document_id)
        else:  # the Handover contract: /docs/<id>?version=<v>
            path = http.path("docs", document.document_id) + f"?version={document.version}"
    except ConnectorError:
        return ""
    parts = urlsplit(integration.base_url.rstrip("/") + path)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def documents_context(enquiry, user, bound=None, placed=None) -> list:
    """The enquiry's documents as the card shows them: each field read, the value used, and
    what this person may do."""
    documents = list(enquiry.attached.select_related("corrected_by").order_by("id"))
    integration = Integration.objects.filter(name=Integration.DOCUMENTS).first()
    may_review = user.has_perm(REVIEW)
    for d in documents:
        d.link = document_link(d, integration)
        d.status_label = STATUS_LABELS.get(d.status, d.status)
        d.rows = [
            {
                "name": name,
                "read": d.extracted[name],
                "value": d.fields[name],
                "corrected": name in d.corrected and d.corrected[name] != d.extracted[name],
            }
            for name in sorted(d.extracted)
        ]
        d.correctable = may_review and bool(d.rows) and enquiry.state in REVISABLE
        d.may_reprocess = may_review
        target = f"doc-{d.pk}"
        d.target = target
        d.bound = bound if bound and bound["target"] == target else None
        d.messages = (placed or {}).get(target, [])
    return documents


def _document(request, reference, pk):
    enquiry = get_enquiry_for_user(request.user, reference)
    return enquiry, get_object_or_404(Document, pk=pk, enquiry=enquiry)


def _back(reference, document):
    return reverse("recovery:review-item", args=[reference]) + f"#doc-{document.pk}"


def _refused(request, enquiry, document, action, form, status, message=""):
    from recovery.views.actions import refused

    return refused(
        request,
        enquiry,
        target=f"doc-{document.pk}",
        action=action,
        form=form,
        status=status,
        message=message,
        page="review",
    )


@require_POST
@console_view
def correct(request, reference, pk):
    require(request.user, REVIEW, "correct a document's field")
    enquiry, document = _document(request, reference, pk)
    form = DocumentCorrectionForm(request.POST, document=document)
    if not form.is_valid():
        return _refused(request, enquiry, document, "correct", form, 422)
    field = form.cleaned_data["field"]
    try:
        correct_document_field(
            document.pk,
            actor=request.user,
            reason=form.cleaned_data["reason"],
            field=field,
            value=form.cleaned_data["value"],
        )
    except REFUSALS as exc:
        log.info("refused %s by %s: %s", request.path, request.user, exc)
        return _refused(request, enquiry, document, "correct", form, 409, str(exc))
    done = recovery.messages.DOCUMENT_CORRECTED % {"field": field, "document": document.document_id}
    messages.success(request, done, extra_tags=f"at-doc-{document.pk}")
    return redirect(_back(reference, document))


@require_POST
@console_view
def reprocess(request, reference, pk):
    require(request.user, REVIEW, "read a document again")
    enquiry, document = _document(request, reference, pk)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        return _refused(request, enquiry, document, "reprocess", form, 422)
    try:
        ledger_services.reprocess_document(
            document.pk, actor=request.user, reason=form.cleaned_data["reason"]
        )
    except REFUSALS as exc:
        log.info("refused %s by %s: %s", request.path, request.user, exc)
        return _refused(request, enquiry, document, "reprocess", form, 409, str(exc))
    done = recovery.messages.DOCUMENT_READ_AGAIN % {
        "document": document.document_id,
        "version": document.version,
    }
    messages.success(request, done, extra_tags=f"at-doc-{document.pk}")
    return redirect(_back(reference, document))
