"""The resident page: ``/r/<token>/``, no login. The signed link (intake.residentlink) is the
only key; the page shows the enquiry's state in the resident's words and what is asked of them,
and takes their answer (text and documents) as a revision of the same enquiry
(intake.answers). A link used after it expired says so and offers to send a new one to the
address on file, which is never shown. Security model: docs/residents.md.

In the ledger, not intake: the page shows what was sent to the resident (the words of the
last "we need more information" message, an operation's payload) and asks the ledger for a
new link's message; intake cannot read either.
"""

from __future__ import annotations

import re
import secrets

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import IntegrityError
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from config.security import client_ip
from intake import answers, residentlink
from intake.models import EnquiryState
from intake.residentmodels import AnswerChannel, AnswerState, ResidentAnswer
from ledger import notices
from ledger.models import Action, Operation

# Each rendering of the form carries a one-time key (hidden field "submission"), kept as the
# answer's provider_token ("page:<key>", unique): a form sent twice (a double click, a browser's
# resend) is taken once and the second answered as the first was.
_SUBMISSION = re.compile(r"\A[0-9a-f]{32}\Z")


def _submission(value) -> str | None:
    return f"page:{value}" if isinstance(value, str) and _SUBMISSION.match(value) else None


# The enquiry's state in the resident's words: (heading, what it means for them).
WAITING = (
    "We have your enquiry",
    "It is waiting for one of our team to look at it. If you have more to tell us, or "
    "documents that help, you can add them below.",
)
PASSING_ON = (
    "Your enquiry is being passed on",
    "It has been checked and is being passed to the team who will deal with it. You do not "
    "need to do anything.",
)
STATE_WORDS = {
    EnquiryState.RECEIVED: WAITING,
    EnquiryState.VALIDATED: WAITING,
    EnquiryState.READY_FOR_REVIEW: WAITING,
    EnquiryState.NEEDS_INFORMATION: (
        "We need more information from you",
        "Before we can go on with your enquiry, we need a little more from you. Please add it "
        "below; it goes to the same enquiry.",
    ),
    EnquiryState.APPROVED: PASSING_ON,
    EnquiryState.SUBMITTED: PASSING_ON,
    EnquiryState.SUBMISSION_UNKNOWN: PASSING_ON,
    EnquiryState.CONFIRMED: (
        "Your enquiry has been passed on",
        "The team who deal with it have it now. You do not need to do anything.",
    ),
    EnquiryState.REJECTED: (
        "Your enquiry is closed",
        "We are not taking it further. If you think this is wrong, please contact us quoting "
        "your reference.",
    ),
}
# The resident-facing words of a "we need more information" message, where the message kept
# them apart from the reviewer's journal reason. Never the reason itself ("request": what a
# reviewer wrote for the journal).
RESIDENT_WORDS_KEYS = ("message_to_resident", "resident_message")
# How each answer came, in the resident's words.
HOW = {
    AnswerChannel.PAGE: "this page",
    AnswerChannel.EMAIL: "a reply by e-mail",
    AnswerChannel.INTAKE: "a new message we joined to this enquiry",
}
NEW_LINKS_PER_DAY = 3
NEW_LINKS_PER_CLIENT_PER_HOUR = 10


def asked_of_them(enquiry) -> str:
    """What the last "we need more information" message asked, in the words written for the
    resident; "" when it kept none apart (the page then says it generally)."""
    payload = (
        Operation.objects.filter(
            enquiry=enquiry,
            action=Action.SEND_NOTICE,
            payload__template=notices.NEEDS_INFORMATION,
        )
        .order_by("-created_at")
        .values_list("payload", flat=True)
        .first()
    ) or {}
    for key in RESIDENT_WORDS_KEYS:
        value = payload.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _context(link, **extra):
    enquiry = link.enquiry
    heading, meaning = STATE_WORDS.get(enquiry.state, WAITING)
    sent = (
        enquiry.answers.filter(state=AnswerState.ATTACHED)
        .order_by("received_at")
        .values("received_at", "channel")
    )
    return {
        "reference": enquiry.reference,
        "received_at": enquiry.created_at,
        "heading": heading,
        "meaning": meaning,
        "asked": asked_of_them(enquiry) if enquiry.state == EnquiryState.NEEDS_INFORMATION else "",
        "can_answer": enquiry.state in answers.ANSWERABLE,
        "expires_at": link.expires_at,
        "sent": [{"at": row["received_at"], "how": HOW[row["channel"]]} for row in sent],
        "max_files": settings.RESIDENT_UPLOAD_MAX_FILES,
        "max_size": answers.size_in_words(settings.RESIDENT_UPLOAD_MAX_BYTES),
        "kinds": answers.KINDS_IN_WORDS,
        "text_max": f"{answers.TEXT_MAX:,}",
        "submission": secrets.token_hex(16),
        **extra,
    }


def _not_valid(request):
    return render(request, "resident/not_valid.html", status=404)


def _expired(request, token, link, *, status=410, **extra):
    return render(
        request,
        "resident/expired.html",
        {"token": token, "reference": link.enquiry.reference, **extra},
        status=status,
    )


def _limit_body(request):
    """The whole form's bound, from its declared length, before Django reads any of it: the
    documents' limit and room for the text."""
    most = settings.RESIDENT_UPLOAD_MAX_FILES * settings.RESIDENT_UPLOAD_MAX_BYTES + 256 * 1024
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = -1
    return declared < 0 or declared > most


@never_cache
@login_not_required
@require_http_methods(["GET", "HEAD", "POST"])
def page(request, token):
    link = residentlink.read(token)
    if link is None:
        return _not_valid(request)
    if link.expired():
        return _expired(request, token, link)
    if request.method == "POST":
        return _answer(request, token, link)
    return render(request, "resident/page.html", _context(link, thanked="sent" in request.GET))


def _answer(request, token, link):
    enquiry = link.enquiry
    submission = _submission(request.POST.get("submission"))
    thanks = HttpResponseRedirect(f"/r/{token}/?sent=1#thanks")
    if submission and ResidentAnswer.objects.filter(provider_token=submission).exists():
        return thanks  # this form was sent before: taken once
    if enquiry.state not in answers.ANSWERABLE:
        return render(request, "resident/page.html", _context(link), status=409)
    if _limit_body(request):
        size = answers.size_in_words(settings.RESIDENT_UPLOAD_MAX_BYTES)
        error = (
            f"What you sent is too large: at most {settings.RESIDENT_UPLOAD_MAX_FILES} documents "
            f"of {size} each."
        )
        return render(
            request, "resident/page.html", _context(link, errors={"files": error}), status=413
        )
    per_hour = settings.RESIDENT_ANSWERS_PER_HOUR
    if not (
        answers.throttle(f"answer:link:{enquiry.pk}", limit=per_hour)
        and answers.throttle(f"answer:client:{client_ip(request)}", limit=per_hour * 3)
    ):
        busy = "You have sent us a lot in the last hour. Please wait an hour and try again."
        response = render(
            request, "resident/page.html", _context(link, errors={"text": busy}), status=429
        )
        response["Retry-After"] = "3600"
        return response
    text = request.POST.get("text", "")
    uploads = [
        answers.Upload(f.name, f.read(settings.RESIDENT_UPLOAD_MAX_BYTES + 1))
        for f in request.FILES.getlist("files")
    ]
    try:
        if not uploads:
            answers.clean_text(text, required=True)
        answers.receive_answer(
            enquiry.pk,
            channel=AnswerChannel.PAGE,
            text=text,
            uploads=uploads,
            provider_token=submission,
        )
    except answers.AnswerRefused as refused:
        context = _context(link, errors={refused.field: refused.message}, typed=_shown(text))
        return render(request, "resident/page.html", context, status=422)
    except IntegrityError:  # the same form sent at the same moment: its twin was taken
        return thanks
    return thanks


def _shown(text) -> str:
    """What the resident typed, given back to the form: what can be shown of it (a lone
    surrogate cannot be encoded in the page)."""
    text = str(text or "")[: answers.TEXT_MAX + 1000]
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")


@never_cache
@login_not_required
@require_POST
def new_link(request, token):
    link = residentlink.read(token)
    if link is None:
        return _not_valid(request)
    enquiry = link.enquiry
    allowed = answers.throttle(
        f"new-link:{enquiry.pk}", limit=NEW_LINKS_PER_DAY, seconds=86400
    ) and answers.throttle(
        f"new-link:client:{client_ip(request)}", limit=NEW_LINKS_PER_CLIENT_PER_HOUR
    )
    if not allowed:
        response = _expired(request, token, link, status=429, limited=True)
        response["Retry-After"] = "3600"
        return response
    answers.request_new_link(enquiry, link=residentlink.url_for(enquiry))
    return _expired(request, token, link, status=200, requested=True)
