"""The words residents receive, in the console: the preview of an action's message on its form,
and the admins' pages that edit each message's template (ledger.wording).

A preview is the whole e-mail as the resident will read it (to, subject, text), filled from the
real enquiry and what the reviewer has typed so far: rendered here, on the page at first and
again by a plain POST from htmx as they type (no script of our own). A template is edited as
plain text with named placeholders; "Preview" fills it with a real enquiry without saving it,
"Save" refuses words that would not fill and otherwise makes the next version, journalled with
the reason.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from intake.models import Enquiry
from ledger import wording
from ledger.models import ENDS_ENQUIRY_PERMISSION, JournalEntry, MessageTemplate
from recovery.forms import ReasonField
from recovery.operator_actions import ENQUIRY_ACTIONS
from recovery.views.common import console_view, get_enquiry_for_user, require

# Who may change the words residents receive: an admin (the set-up permission).
TEMPLATE_PERMISSION = "ledger.change_integration"
# The action on an enquiry -> the message it sends the resident.
ACTION_KINDS = {
    "request_information": wording.NEEDS_INFORMATION,
    "reject": wording.NOT_TAKEN_FORWARD,
    # Cancelling the CRM write an enquiry waits on: the enquiry is closed.
    "cancel": wording.CLOSED,
}
NOTHING_TYPED = "[Your message to the resident appears here, word for word.]"


def preview(enquiry, action: str, typed: str = "") -> dict:
    """The e-mail an action on ``enquiry`` would send, with ``typed`` as the message to the
    resident: {"to", "subject", "text", "title"}; {"none": True} when nothing would be sent."""
    kind = ACTION_KINDS[action]
    if not enquiry.email:
        return {"none": True}
    typed = (typed or "").strip()
    values = wording.values_for(enquiry, message_to_resident=typed or NOTHING_TYPED)
    subject, text, _ = wording.render(wording.current(kind), values)
    return {
        "to": enquiry.email,
        "subject": subject,
        "text": text,
        "title": wording.KINDS[kind].title,
        "empty": not typed,
    }


@require_POST
@console_view
def action_preview(request, reference, action):
    """The preview of an action's message as typed so far (the form's own fields, POSTed by
    htmx): a fragment for the form's preview box."""
    if action not in ACTION_KINDS:
        raise Http404("no such message")
    enquiry = get_enquiry_for_user(request.user, reference)
    if action not in ENQUIRY_ACTIONS:
        require(request.user, ENDS_ENQUIRY_PERMISSION, "preview this message")
    elif not ENQUIRY_ACTIONS[action].may(request.user):
        require(request.user, ENQUIRY_ACTIONS[action].permissions[0], "preview this message")
    typed = request.POST.get("resident_message", "")[:5000]
    return render(
        request, "recovery/_mail_preview.html", {"preview": preview(enquiry, action, typed)}
    )


class TemplateForm(forms.Form):
    subject = forms.CharField(max_length=wording.SUBJECT_MAX, strip=False, label="Subject")
    body = forms.CharField(
        max_length=wording.BODY_MAX,
        strip=False,
        label="Message",
        widget=forms.Textarea(attrs={"rows": 16}),
    )
    reference = forms.CharField(
        max_length=64, required=False, label="Preview with the enquiry (its reference)"
    )
    reason = ReasonField(required=False)

    def __init__(self, *args, kind, **kwargs):
        super().__init__(*args, **kwargs)
        self.kind = kind

    def clean(self):
        data = super().clean()
        if "subject" in data and "body" in data:
            for problem in wording.problems(self.kind, data["subject"], data["body"]):
                self.add_error(None, problem)
        return data


def _sample_enquiry(reference: str):
    if reference:
        return Enquiry.objects.filter(reference=reference).first()
    return Enquiry.objects.exclude(email="").order_by("-created_at").first()


def _filled(kind: str, template, enquiry) -> dict:
    """``template`` filled for ``enquiry`` (or, with none, for an example), as shown."""
    spec = wording.KINDS[kind]
    extra = {
        "message_to_resident": "(what the reviewer writes for the resident)",
        "destination_reference": "CRM-10442",
    }
    extra = {k: v for k, v in extra.items() if k in spec.extra}
    if enquiry is not None:
        values = wording.values_for(enquiry, **extra)
    else:
        values = {"reference": "HX-2026-000123", "name": "A. Resident", **extra}
    subject, text, html = wording.render(template, values)
    return {"subject": subject, "text": text, "html": html}


def resident_messages(request) -> dict:
    """The Messages page's part about residents: every message a resident can receive, when it
    is sent and when not, its words now filled for a real enquiry (``?reference=``, or the
    newest with an address)."""
    enquiry = _sample_enquiry(request.GET.get("reference", "")[:64])
    shown = []
    for kind, spec in wording.KINDS.items():
        template = wording.current(kind)
        shown.append(
            {"spec": spec, "template": template, "filled": _filled(kind, template, enquiry)}
        )
    return {
        "resident_shown": shown,
        "sample_enquiry": enquiry,
        "may_edit": request.user.has_perm(TEMPLATE_PERMISSION),
    }


@require_http_methods(["GET", "POST"])
@console_view
def template_edit(request, kind):
    if kind not in wording.KINDS:
        raise Http404("no such message")
    require(request.user, TEMPLATE_PERMISSION, "change the words residents receive")
    spec = wording.KINDS[kind]
    template = wording.current(kind)
    saving = request.method == "POST" and "save" in request.POST
    if request.method == "POST":
        form = TemplateForm(request.POST, kind=kind)
    else:
        form = TemplateForm(initial={"subject": template.subject, "body": template.body}, kind=kind)
    filled, status = None, 200
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        if saving and not data["reason"]:
            form.add_error("reason", "Give a reason: it is written to the journal.")
        elif saving:
            row = wording.publish(
                kind,
                subject=data["subject"],
                body=data["body"],
                actor=request.user,
                reason=data["reason"],
            )
            messages.success(
                request, f"Saved as version {row.version}: new messages use these words."
            )
            return redirect(reverse("recovery:message-template", args=[kind]))
        candidate = MessageTemplate(kind=kind, subject=data["subject"], body=data["body"])
        enquiry = _sample_enquiry(data.get("reference", "").strip())
        filled = _filled(kind, candidate, enquiry)
    elif form.is_bound:
        status = 422
    else:
        filled = _filled(kind, template, _sample_enquiry(""))
    versions = MessageTemplate.objects.filter(kind=kind).select_related("created_by")[:20]
    reasons = {
        e.subject_id: e
        for e in JournalEntry.objects.filter(
            subject_type="ledger.messagetemplate",
            subject_id__in=[str(v.pk) for v in versions],
            action="ledger.message_template.changed",
        )
    }
    context = {
        "spec": spec,
        "template": template,
        "form": form,
        "filled": filled,
        "placeholders": [(p, wording.PLACEHOLDERS[p]) for p in spec.placeholders],
        "versions": [(v, reasons.get(str(v.pk))) for v in versions],
    }
    return render(request, "recovery/message_template_edit.html", context, status=status)
