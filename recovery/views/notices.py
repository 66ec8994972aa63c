"""The messages Handover sends people, as an admin reads them: the residents' (ledger.wording,
each filled for a real enquiry, with its version and a link to edit it: recovery.views.wording)
and the operators' (ledger.notices, with sample values), text and HTML, who gets each and when."""

from __future__ import annotations

import re

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET, require_http_methods

import recovery.messages
from ledger import journal, notices
from recovery.models import NoticePreference, OperatorNotice
from recovery.views.common import console_view
from recovery.views.wording import resident_messages

_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.S | re.I)


# An e-mail's HTML carries inline styles (mail clients ignore style sheets); the console's
# Content-Security-Policy refuses them, so the page shows the message without them.
_STYLE_ATTRIBUTE = re.compile(r"""\sstyle=("[^"]*"|'[^']*')""", re.I)


def _body(html: str) -> str:
    match = _BODY.search(html)
    return _STYLE_ATTRIBUTE.sub("", match.group(1) if match else html)


@require_GET
@console_view
def notice_list(request):
    shown = []
    for notice in notices.NOTICES.values():
        subject, text, html = notices.render(notice.name, notice.sample)
        shown.append(
            {
                "notice": notice,
                "subject": subject,
                "text": text,
                # Our own template with sample values, each escaped by the template engine.
                "html": mark_safe(_body(html)),
            }
        )
    context = {"shown": shown, **resident_messages(request)}
    return render(request, "recovery/notices.html", context)


@require_http_methods(["GET", "POST"])
@console_view
def my_notices(request):
    """A person's own page: whether they are e-mailed about work that needs them, and what was
    recently gathered for them (recovery.notices)."""
    user = request.user
    preference, _ = NoticePreference.objects.get_or_create(user=user)
    if request.method == "POST":
        wanted = request.POST.get("enabled") == "on"
        if wanted != preference.enabled:
            with transaction.atomic():
                preference.enabled = wanted
                preference.changed_at = timezone.now()
                preference.save(update_fields=["enabled", "changed_at"])
                journal.record(
                    user,
                    "recovery.person.notices_changed",
                    actor=user,
                    reason="turned on" if wanted else "turned off",
                    evidence={"enabled": wanted},
                )
        messages.success(
            request, recovery.messages.NOTICES_ON if wanted else recovery.messages.NOTICES_OFF
        )
        return redirect("recovery:me")
    recent = (
        OperatorNotice.objects.filter(user=user)
        .select_related("operation")
        .order_by("-created_at", "-pk")[:20]
    )
    context = {
        "preference": preference,
        "recent": recent,
        "interval": settings.OPERATOR_NOTICE_MINUTES,
        "address": user.email,
    }
    return render(request, "recovery/my_notices.html", context)
