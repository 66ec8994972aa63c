"""What every console view shares: access checks, service calls, refusals as messages."""

from __future__ import annotations

import logging
from functools import cached_property, wraps

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django_fsm import ConcurrentTransition, TransitionNotAllowed

import ledger.messages
import recovery.messages
from intake.models import Enquiry
from intake.workflow import ActionRefused
from ledger.models import Operation
from recovery.permissions import VIEW_PERMISSION

log = logging.getLogger("recovery.actions")


# "Not now, not like this": shown as a message, nothing changed (never a 500).
REFUSALS = (ActionRefused, TransitionNotAllowed, ConcurrentTransition)


def whole_number(value, *, default: int | None = None, maximum: int = 10**9) -> int | None:
    """A query value as a positive whole number of ASCII digits, or ``default``.

    ``str.isdigit()`` also accepts "²" and "٣", which ``int()`` refuses or reads otherwise; a
    value past ``maximum`` would overflow the database's integer. Both are ignored, as a value
    that is not a number at all is.
    """
    if not isinstance(value, str) or not (value.isascii() and value.isdigit()):
        return default
    number = int(value) if len(value) <= len(str(maximum)) else maximum + 1
    return number if 0 < number <= maximum else default


def forbidden(request, message: str):
    return render(request, "recovery/forbidden.html", {"message": message}, status=403)


def console_view(view):
    """A console page: a person with a console role (403 otherwise, the login page for nobody)."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.has_perm(VIEW_PERMISSION):
            return forbidden(request, recovery.messages.NO_CONSOLE_ROLE)
        try:
            return view(request, *args, **kwargs)
        except PermissionDenied as exc:
            return forbidden(request, str(exc) or recovery.messages.MAY_NOT)

    return wrapper


def require(user, permission: str, what: str):
    if not user.has_perm(permission):
        raise PermissionDenied(
            recovery.messages.NEEDS_PERMISSION
            % {"what": what, "who": ledger.messages.holders(permission)}
        )


def get_operation_for_user(user, op_id) -> Operation:
    """The operation, if this person may see operations at all (404 for no such row)."""
    require(user, "ledger.view_operation", "see operations")
    return get_object_or_404(
        Operation.objects.select_related("enquiry", "integration", "owner"), pk=op_id
    )


def item_url(op) -> str:
    """The page an operation is shown on: its enquiry's item page, or (a message to an
    operator, which has no enquiry) its own."""
    from django.urls import reverse

    if op.enquiry_id is None:
        return reverse("recovery:operation", args=[op.pk])
    return reverse("recovery:enquiry", args=[op.enquiry.reference])


def get_enquiry_for_user(user, reference) -> Enquiry:
    require(user, VIEW_PERMISSION, "see enquiries")
    return get_object_or_404(
        Enquiry.objects.select_related("category", "owner"), reference=reference
    )


def run(request, back: str, call, done: str):
    """Call a service; a refusal becomes a message (never a 500), success a message too."""
    try:
        call()
    except REFUSALS as exc:
        messages.error(request, str(exc) or recovery.messages.NOT_POSSIBLE_FOR_ITEM)
        log.info("refused %s by %s: %s", request.path, request.user, exc)
    else:
        messages.success(request, done)
    return redirect(back)


def form_refused(request, form, back: str):
    for errors in form.errors.values():
        for error in errors:
            messages.error(request, error)
    return redirect(back)


def int_param(query, name: str) -> int | None:
    """``query[name]`` as a positive whole number (``whole_number``: ASCII digits, nine at
    most), or None if absent or not one; the caller says on the page what it did instead."""
    return whole_number(query.get(name, "").strip(), maximum=999_999_999)


class CappedPaginator(Paginator):
    """Django's Paginator counting at most ``cap`` rows: past a few thousand matches nobody
    pages on, and an exact count of a large match walks every matching row."""

    def __init__(self, object_list, per_page, *, cap: int):
        super().__init__(object_list, per_page)
        self.cap = cap

    @cached_property
    def counted(self) -> int:
        # No ORDER BY: counting needs no order, and sorting every match is the slow part.
        return self.object_list.order_by()[: self.cap + 1].count()

    @cached_property
    def count(self) -> int:
        return min(self.counted, self.cap)

    @property
    def more(self) -> bool:
        """More rows match than were counted."""
        return self.counted > self.cap


def paginate(request, object_list, per_page: int, *, cap: int = 10_000):
    """The requested page of ``object_list`` and notes for a page number that was not usable.

    A page past the end shows the last page, a page that is not a number the first, and each
    says so: a silent page 1 looked like the list had changed.
    """
    paginator = CappedPaginator(object_list, per_page, cap=cap)
    notes = []
    raw = request.GET.get("page", "")
    number = int_param(request.GET, "page")
    if raw and (number is None or number < 1):
        notes.append(recovery.messages.PAGE_NOT_UNDERSTOOD % {"page": raw[:40]})
        number = 1
    number = number or 1
    if number > paginator.num_pages:
        notes.append(
            recovery.messages.NO_SUCH_PAGE % {"number": number, "last": paginator.num_pages}
        )
        number = paginator.num_pages
    return paginator.page(number), notes


def safe_next(request, default: str) -> str:
    """Where a form's ``next`` sends the person back: a console path, never another site (no
    scheme or host, and no ``//`` or ``\\`` a browser reads as one); anything else is
    ``default``. The one guard for every form that comes back."""
    back = request.POST.get("next", "")
    if back.startswith("/console/") and "//" not in back and "\\" not in back:
        return back
    return default
