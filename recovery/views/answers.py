"""A resident's reply waiting for a person (the queue's "Resident reply waiting"): read it,
attach it to the enquiry it belongs to, or set it aside; each with a reason, journalled
(intake.answers). Its documents are downloaded as attachments, never shown inline."""

from __future__ import annotations

from urllib.parse import quote

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

import recovery.messages
from intake import answers
from intake.residentmodels import ResidentAnswer, ResidentFile
from ledger.models import JournalEntry
from recovery import ownership
from recovery.views.common import REFUSALS, console_view

ATTACH_PERMISSION = "intake.review_enquiry"


def _answer(pk) -> ResidentAnswer:
    return get_object_or_404(ResidentAnswer.objects.select_related("enquiry", "owner"), pk=pk)


def _page(request, answer, *, status=200, error="", typed=None):
    journal = (
        JournalEntry.objects.select_related("erasable")
        .filter(subject_type="intake.residentanswer", subject_id=str(answer.pk))
        .order_by("at", "pk")
    )
    return render(
        request,
        "recovery/answer.html",
        {
            "answer": answer,
            "files": answer.files.only("pk", "name", "content_type", "size"),
            "owner": ownership.item_owner(answer),
            "journal": journal,
            "may_act": answer.waiting and request.user.has_perm(ATTACH_PERMISSION),
            "error": error,
            "typed": typed or {"reference": "", "reason": ""},
        },
        status=status,
    )


@console_view
@require_GET
def answer_detail(request, pk):
    return _page(request, _answer(pk))


def _may_act(request):
    if not request.user.has_perm(ATTACH_PERMISSION):
        raise PermissionDenied(recovery.messages.MAY_NOT)


def _done(request, answer, message):
    messages.success(request, message)
    return redirect(reverse("recovery:answer", args=[answer.pk]))


def _refused(request, answer, exc, what):
    # The page again with what was typed and why (422), nothing changed.
    typed = {k: request.POST.get(k, "")[:1000] for k in ("reference", "reason")}
    return _page(request, answer, status=422, error=f"Not {what}: {exc}", typed=typed)


@console_view
@require_POST
def answer_attach(request, pk):
    _may_act(request)
    answer = _answer(pk)
    reference = request.POST.get("reference", "")
    try:
        answers.attach_answer(
            answer.pk, reference=reference, actor=request.user, reason=request.POST.get("reason")
        )
    except REFUSALS as exc:
        return _refused(request, answer, exc, "attached")
    answer.refresh_from_db()
    return _done(request, answer, f"Attached to {answer.enquiry.reference} as its revision.")


@console_view
@require_POST
def answer_set_aside(request, pk):
    _may_act(request)
    answer = _answer(pk)
    try:
        answers.set_aside(answer.pk, actor=request.user, reason=request.POST.get("reason"))
    except REFUSALS as exc:
        return _refused(request, answer, exc, "set aside")
    return _done(request, answer, "Set aside: it has left the queue and is kept here.")


@console_view
@require_GET
def answer_file(request, pk, file_id):
    document = get_object_or_404(ResidentFile, pk=file_id, answer_id=pk)
    response = HttpResponse(bytes(document.data), content_type=document.content_type)
    # Always a download: a resident's file is never rendered by the console's origin.
    response["Content-Disposition"] = "attachment; filename*=UTF-8''" + _quoted(document.name)
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _quoted(name: str) -> str:
    return quote(name.encode("utf-8", "replace"), safe="")
