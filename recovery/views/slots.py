"""Appointment slots on the review page: the card, and a reviewer's request for a new read.

The page never reads the calendar: a read is an operation a worker runs. The card shows the
last read with its age; when it is stale (or there is none) it asks for a read itself (htmx
posts the card's form on load; without JavaScript the button does) and then polls until the
outcome is recorded.
"""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

import recovery.messages
from ledger import services as ledger_services
from recovery.views.common import REFUSALS, console_view, get_enquiry_for_user, require

REVIEW_PERMISSION = "intake.review_enquiry"


def _card(request, enquiry, *, refused=""):
    return render(
        request,
        "recovery/_slots_card.html",
        {"enquiry": enquiry, "slots": ledger_services.slots_view(enquiry), "refused": refused},
    )


@require_GET
@console_view
def slots_card(request, reference):
    """The card alone: htmx polls it while a read is under way, and while a read is fresh (so
    the card says "stale" when it becomes so)."""
    require(request.user, REVIEW_PERMISSION, "review enquiries")
    enquiry = get_enquiry_for_user(request.user, reference)
    return _card(request, enquiry)


@require_POST
@console_view
def read_slots(request, reference):
    require(request.user, REVIEW_PERMISSION, "review enquiries")
    enquiry = get_enquiry_for_user(request.user, reference)
    refused = None
    if not ledger_services.needs_visit(enquiry):
        refused = recovery.messages.SLOTS_NOT_NEEDED % {"reference": reference}
    else:
        try:
            ledger_services.request_slots(
                enquiry.pk, actor=request.user, reason=recovery.messages.SLOTS_REASON
            )
        except REFUSALS as exc:
            refused = str(exc) or recovery.messages.NOT_POSSIBLE_FOR_ITEM
    if request.headers.get("HX-Request"):
        # htmx swaps 2xx answers only: a refusal is said inside the card it replaces.
        return _card(request, enquiry, refused=refused or "")
    if refused:
        messages.error(request, refused)
    return redirect(reverse("recovery:review-item", args=[reference]) + "#slots")
