"""The queue, the review queue and the enquiry search: lists, paged, constant queries."""

from django.db.models import Count, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from intake.models import Enquiry, EnquiryState, Suggestion
from ledger.models import Integration
from recovery import queue as work
from recovery.forms import people
from recovery.models import Queue, QueueVisit
from recovery.views.common import console_view, require

REVIEW_PAGE_SIZE = 20
SEARCH_PAGE_SIZE = 50


def _page_number(request) -> int:
    value = request.GET.get("page", "1")
    return int(value) if value.isdigit() and 0 < int(value) < 100000 else 1


def record_visit(user, queues):
    """Who opened which queue, last (one upsert): the dashboard flags queues nobody opens."""
    now = timezone.now()
    QueueVisit.objects.bulk_create(
        [QueueVisit(user=user, queue=q, opened_at=now) for q in queues],
        update_conflicts=True,
        unique_fields=["user", "queue"],
        update_fields=["opened_at"],
    )


def inspected_queues(page, filters) -> list[str]:
    """The queues this page counts as inspected: those with an item on it that this person may
    act on (opening the queue page is not inspecting every queue), and a queue opened alone
    and found empty (nothing in it was left unseen)."""
    seen = {row.queue for row in page.rows if getattr(row, "actions", None)}
    if filters.queue and page.count == 0:
        seen.add(filters.queue)
    return sorted(seen)


@require_GET
@console_view
def queue(request):
    filters = work.Filters.from_request(request)
    page = work.page(filters, _page_number(request), user=request.user)
    record_visit(request.user, inspected_queues(page, filters))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "recovery/queue.html",
        {
            "page": page,
            "filters": filters,
            "query": query.urlencode(),
            "queues": [(q.value, q.label) for q in Queue if q != Queue.REVIEW],
            "integrations": Integration.NAMES,
            "owners": people(),
            "now": timezone.now(),
        },
    )


def latest_suggestion(column):
    return Subquery(
        # The newest suggestion, whichever revision it was made for (an edit makes no new one).
        Suggestion.objects.filter(enquiry=OuterRef("pk"))
        .order_by("-revision", "-created_at")
        .values(column)[:1]
    )


@require_GET
@console_view
def review_list(request):
    require(request.user, "intake.review_enquiry", "open the review queue")
    matches = Subquery(
        Enquiry.objects.filter(email=OuterRef("email"), created_at__lt=OuterRef("created_at"))
        .exclude(email="")
        .order_by()
        .values("email")
        .annotate(n=Count("pk"))
        .values("n")[:1]
    )
    qs = (
        Enquiry.objects.filter(state=EnquiryState.READY_FOR_REVIEW)
        .select_related("category", "owner")
        .annotate(
            suggested=latest_suggestion("label"),
            suggestion_explanation=latest_suggestion("explanation"),
            suggestion_validation=latest_suggestion("validation"),
            suggestion_confidence=latest_suggestion("confidence"),
            suggestion_revision=latest_suggestion("revision"),
            earlier=Coalesce(matches, Value(0)),
        )
        .order_by("state_changed_at", "pk")  # oldest first
    )
    if request.GET.get("unresolved") == "1":
        qs = qs.filter(category__isnull=True)
    count = qs.count()
    number = _page_number(request)
    start = (number - 1) * REVIEW_PAGE_SIZE
    record_visit(request.user, [Queue.REVIEW])  # only reviewers reach this page
    return render(
        request,
        "recovery/review_list.html",
        {
            "enquiries": list(qs[start : start + REVIEW_PAGE_SIZE]),
            "count": count,
            "number": number,
            "has_next": start + REVIEW_PAGE_SIZE < count,
            "unresolved_only": request.GET.get("unresolved") == "1",
        },
    )


@require_GET
@console_view
def enquiry_list(request):
    """Find an enquiry by reference (or part of one), optionally by state; newest first."""
    q = request.GET.get("q", "").strip()[:64]
    state = request.GET.get("state", "")
    qs = Enquiry.objects.select_related("category", "owner").order_by("-created_at", "pk")
    if q:
        qs = qs.filter(Q(reference__iexact=q) | Q(reference__icontains=q))
    if state in EnquiryState.values:
        qs = qs.filter(state=state)
    count = qs.count()
    number = _page_number(request)
    start = (number - 1) * SEARCH_PAGE_SIZE
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "recovery/enquiry_list.html",
        {
            "enquiries": list(qs[start : start + SEARCH_PAGE_SIZE]),
            "count": count,
            "number": number,
            "has_next": start + SEARCH_PAGE_SIZE < count,
            "q": q,
            "state": state,
            "states": EnquiryState.choices,
            "query": query.urlencode(),
        },
    )
