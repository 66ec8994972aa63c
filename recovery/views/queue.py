"""The queue, the review queue and the enquiry search: lists, paged, constant queries."""

from datetime import UTC, timedelta

from django.contrib.postgres.search import SearchVectorField
from django.db.models import (
    Case,
    Count,
    DateTimeField,
    ExpressionWrapper,
    F,
    Func,
    Max,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.shortcuts import render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.views.decorators.http import require_GET

import recovery.queue
from intake.models import Enquiry, EnquiryState, Revision, Suggestion
from intake.search import search_query
from ledger import limits
from ledger.models import Integration, JournalEntry
from recovery import messages, ownership
from recovery.forms import BulkForm, people
from recovery.models import Queue, QueueVisit
from recovery.views.common import console_view, int_param, paginate, require
from recovery.words import group_label

# Saved views: links with their query strings (a bookmark is a saved view too).
QUICK_VIEWS = [
    ("My overdue", "mine=1&overdue=1"),
    ("Mine", "mine=1"),
    ("CRM unknown", "state=unknown&integration=crm"),
    ("CRM failed", "state=failed&integration=crm"),
    ("Fallen to admins", "owner=none"),
    ("Last attempted", "sort=attempt"),
    ("Due soonest", "sort=due"),
]
REVIEW_PAGE_SIZE = 20
SEARCH_PAGE_SIZE = 50
# The search counts its word matches exactly up to here, then says "1,000+ found": a coordinator
# refines a search long before a thousand matches, and counting further reads the heap for each
# (about 9,400 pages to count 10,001 of a common word at 1,000,000 enquiries,
# docs/benchmarks.md). At least FEW_MATCHES, so that the count tells which way the page is read.
SEARCH_COUNT_CAP = 1_000
MAX_QUEUE_PAGE = 100_000 // recovery.queue.PAGE_SIZE  # as far as anyone pages: 100,000 rows


def record_visit(user, queues):
    """Who opened which queue, last (one upsert): the dashboard flags queues nobody opens."""
    now = timezone.now()
    QueueVisit.objects.bulk_create(
        [QueueVisit(user=user, queue=q, opened_at=now) for q in queues],
        update_conflicts=True,
        unique_fields=["user", "queue"],
        update_fields=["opened_at"],
    )


def moved_away(user, since=None) -> dict | None:
    """Items that changed owner away from this person since they last opened the queue (an
    escalation, or someone's reassignment), or since ``since`` (the moment an open page was
    loaded): said at the top of the queue, so a list read earlier is not taken to be the same
    list now. None when nothing moved."""
    # One query whatever happened (the queue page counts its queries): the last visit is a
    # subquery, and it is read back with the rows.
    last = since or Subquery(
        QueueVisit.objects.filter(user=user)
        .order_by()
        .values("user")
        .annotate(at=Max("opened_at"))
        .values("at")[:1]
    )
    name = user.get_username()
    rows = list(
        JournalEntry.objects.filter(
            at__gt=last,
            action__in=ownership.HANDOVER_ACTIONS,
            evidence__from=name,
        )
        .exclude(evidence__to=name)
        .annotate(since=Value(since) if since else last)
        .values_list("subject_id", "evidence__to", "action", "since")
    )
    if not rows:
        return None
    items = {subject for subject, _to, _action, _since in rows}
    to = sorted({str(t) for _s, t, _a, _since in rows if t})
    escalated = any(action == "recovery.escalated" for _s, _t, action, _since in rows)
    return {"since": rows[0][3], "count": len(items), "to": to, "escalated": escalated}


def inspected_queues(page, filters) -> list[str]:
    """The queues this page counts as inspected: those with an item on it that this person may
    act on (opening the queue page is not inspecting every queue), and a queue opened alone
    and found empty (nothing in it was left unseen)."""
    seen = {row.queue for row in page.rows if getattr(row, "actions", None)}
    if filters.queue and page.count == 0:
        seen.add(filters.queue)
    return sorted(seen)


# A queue page polls from the moment it was loaded; a moment further back than this, or ahead of
# now, is no page's (year 1, year 9999, an offset that overflows): nothing is polled for it.
POLL_MAX_AGE = timedelta(days=7)
POLL_SKEW = timedelta(minutes=5)


def poll_moment(raw: str):
    """``raw`` as an aware moment in UTC when it is ISO 8601 and within the last POLL_MAX_AGE
    (and not ahead of now by more than POLL_SKEW); None otherwise, whatever it holds."""
    raw = raw[:40]
    if not raw or "\x00" in raw:
        return None
    try:
        since = parse_datetime(raw)
        if since is None:
            return None
        if timezone.is_naive(since):
            since = since.replace(tzinfo=UTC)
        since = since.astimezone(UTC)  # year 1 at +01:00 is before datetime.min: OverflowError
    except (ValueError, OverflowError):  # well formed, not a date (month 13, offset +99:00)
        return None
    now = timezone.now()
    if not now - POLL_MAX_AGE <= since <= now + POLL_SKEW:
        return None
    return since


@require_GET
@console_view
def queue_moved(request):
    """What changed owner away from this person since their open queue page was loaded
    (``?since=`` its moment, ISO 8601): the page polls this and says so while it is read.
    Nothing (an empty notice that keeps polling) when nothing moved; an empty notice that stops
    polling when ``since`` is not a moment of the last week (``poll_moment``), never an error."""
    since = poll_moment(request.GET.get("since", ""))
    moved = moved_away(request.user, since=since) if since else None
    # The list to reload: the queue page that polls, with its filters (only a queue address).
    back = request.GET.get("back", "")[:2000]
    if not back.startswith("/console/?") or "\x00" in back:
        back = "/console/"
    return render(
        request,
        "recovery/_queue_moved.html",
        {"moved_live": moved, "since": since, "back": back},
    )


@require_GET
@console_view
def queue(request):
    filters = recovery.queue.Filters.from_request(request)
    notes = list(filters.not_understood)
    raw = request.GET.get("page", "")
    number = int_param(request.GET, "page")
    if raw and not number:
        notes.append(messages.PAGE_NOT_UNDERSTOOD % {"page": raw[:40]})
    elif number and number > MAX_QUEUE_PAGE:
        # Past the count's cap the page is an OFFSET that every group reads up to.
        notes.append(messages.PAGE_TOO_FAR % {"number": number, "last": MAX_QUEUE_PAGE})
        number = MAX_QUEUE_PAGE
    page = recovery.queue.page(filters, number or 1, user=request.user)
    if number and number > page.number:
        notes.append(messages.NO_SUCH_PAGE % {"number": number, "last": page.number})
    moved = moved_away(request.user)
    record_visit(request.user, inspected_queues(page, filters))
    current = request.GET.copy()
    current.pop("page", None)
    return render(
        request,
        "recovery/queue.html",
        {
            "page": page,
            "filters": filters,
            "notes": notes,
            "moved": moved,
            "loaded_at": timezone.now(),
            "failure_groups": recovery.queue.failure_groups(filters),
            "group_label": group_label(filters.group) if filters.group else "",
            "sorts": [(value, label) for value, (label, _sql) in recovery.queue.SORTS.items()],
            "sort_label": recovery.queue.SORTS[filters.sort][0],
            "quick_views": QUICK_VIEWS,
            "current_query": current.urlencode(),
            **bulk_menu(page.rows, request.user),
            "queues": [(q.value, q.label) for q in Queue if q != Queue.REVIEW],
            "integrations": Integration.NAMES,
            "owners": people(),
            "now": timezone.now(),
            # Not failures, so not rows: work waiting for a destination's turn (ledger.limits).
            "waiting": limits.waiting(),
        },
    )


def bulk_menu(rows, user) -> dict:
    """The bulk menu offers what this person may do to at least one row shown, and says who
    may do the rest (never an action that would come back "0 done, N refused")."""
    import ledger.messages
    from ledger.policies import permission_for

    offered = {a for row in rows for a in getattr(row, "actions", ())}
    if "assign" in offered:
        offered.add("reassign")
    actions = [(value, label) for value, label in BulkForm.ACTIONS if value in offered]
    others = []
    for value, label in BulkForm.ACTIONS:
        if value in offered:
            continue
        ops = [r.obj for r in rows if r.kind == recovery.queue.KIND_OPERATION and r.obj is not None]
        needed = {permission_for(op, value) for op in ops if value in _state_allows(op)}
        if needed:
            who = " or ".join(sorted({ledger.messages.holders(p) for p in needed}))
            others.append(f"{label}: only {who} may")
    return {"bulk_actions": actions, "bulk_others": others}


def _state_allows(op) -> list[str]:
    from ledger.policies import state_allows

    try:
        return state_allows(op)
    except KeyError:
        return []


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
            # Who made the current revision: a person's edit, or nobody (the suggester's
            # category, the intake's first): only a person's is "edited".
            edited_by=Subquery(
                Revision.objects.filter(
                    enquiry=OuterRef("pk"), number=OuterRef("current_revision")
                ).values("created_by__username")[:1]
            ),
        )
        .order_by("state_changed_at", "pk")  # oldest first
    )
    unresolved = request.GET.get("unresolved", "")
    notes = []
    if unresolved == "1":
        qs = qs.filter(category__isnull=True)
    elif unresolved:
        notes.append(
            messages.FILTER_NOT_UNDERSTOOD % {"name": "unresolved", "value": unresolved[:40]}
        )
    page, page_notes = paginate(request, qs, REVIEW_PAGE_SIZE)
    record_visit(request.user, [Queue.REVIEW])  # only reviewers reach this page
    return render(
        request,
        "recovery/review_list.html",
        {
            "page": page,
            "enquiries": list(page),
            "count": page.paginator.count,
            "notes": notes + page_notes,
            "unresolved_only": unresolved == "1",
        },
    )


# What a search reads: its first SEARCH_CHARACTERS characters and SEARCH_WORDS words. Each word
# is a prefix read from the GIN index; more words only narrow what eight already found.
SEARCH_CHARACTERS = 200
SEARCH_WORDS = 8


def bounded_query(raw: str) -> tuple[str, list[str]]:
    """What a search reads of ``raw`` and notes saying what it left out."""
    # PostgreSQL refuses a NUL in any text it is sent.
    text = raw.replace("\x00", "").strip()
    words = text[:SEARCH_CHARACTERS].split()
    notes = []
    if len(text) > SEARCH_CHARACTERS:
        dropped = text[SEARCH_CHARACTERS:].strip()
        notes.append(
            messages.SEARCH_CHARACTERS_DROPPED
            % {
                "limit": SEARCH_CHARACTERS,
                "length": len(text),
                "dropped": dropped[:60] + ("…" if len(dropped) > 60 else ""),
            }
        )
    if len(words) > SEARCH_WORDS:
        dropped = " ".join(words[SEARCH_WORDS:])
        notes.append(
            messages.SEARCH_WORDS_DROPPED
            % {"limit": SEARCH_WORDS, "dropped": dropped[:60] + ("…" if len(dropped) > 60 else "")}
        )
    return " ".join(words[:SEARCH_WORDS]), notes


REFERENCE_MATCHES = 20  # references that start the same: more means a longer prefix is needed


def search(qs, q: str):
    """(references that are ``q`` or start with it, the enquiries whose words match).

    Two queries, so that each reads its index and the word matches keep a plain newest-first
    order: for a common word PostgreSQL then walks the created_at index backwards and stops at
    the page, for a rare one it reads ``enquiry_search`` and sorts the few. (One query ordered
    "reference first, then newest" made it sort every match of a common word.) A reference is
    upper case and people type it any way; its start is found with or without "ENQ-".
    """
    references = list(reference_matches(qs, q))
    words = (
        qs.filter(search_vector=search_query(q))
        .exclude(pk__in=[e.pk for e in references])
        .order_by("-created_at", "pk")
    )
    return references, words


# A reference's start is looked up from this many characters after "ENQ-": one or two are the
# start of a sixteenth or more of all references (62,000 of 1,000,000, read and sorted to list
# 20: 1.5-2.5 s, docs/benchmarks.md), and list nobody in particular. Shorter, only the exact one.
REFERENCE_PREFIX_MIN = 3


def reference_matches(qs, q: str):
    """The enquiries whose reference is ``q`` or starts with it (with or without "ENQ-"; a start
    of at least REFERENCE_PREFIX_MIN characters), the exact one first, at most
    REFERENCE_MATCHES."""
    ref = q.upper()
    if len(ref.removeprefix("ENQ-")) < REFERENCE_PREFIX_MIN:
        return qs.filter(reference=ref)[:1]
    by_reference = Q(reference__startswith=ref)
    if not ref.startswith("ENQ-"):
        by_reference |= Q(reference__startswith=f"ENQ-{ref}")
    return (
        qs.filter(by_reference)
        .annotate(exact=Case(When(reference=ref, then=Value(0)), default=Value(1)))
        .order_by("exact", "reference")[:REFERENCE_MATCHES]
    )


# Up to this many word matches, the page is sorted from the GIN index (``sorted_matches``);
# beyond, walking created_at meets a match every few rows and stops at the page sooner. At most
# SEARCH_COUNT_CAP: the count (``counted``, up to the cap + 1) must tell the two apart.
FEW_MATCHES = 1_000


def sorted_matches(words, page):
    """The page's rows of a word search with few matches, read from ``enquiry_search`` and
    sorted, never by walking the created_at index.

    For a short page (one match, LIMIT 1) PostgreSQL otherwise expects to meet a match soon
    walking created_at backwards and reads the whole table to find a rare one (600 ms at
    200,000 enquiries, docs/benchmarks.md). FEW_MATCHES bounds the sort.
    """
    unindexed = ExpressionWrapper(F("created_at") + Value(timedelta(0)), DateTimeField())
    start = (page.number - 1) * page.paginator.per_page
    return words.order_by(unindexed.desc(), "pk")[start : start + page.paginator.per_page]


def walked_matches(qs, q: str, references, page):
    """The page's rows of a word search with more than FEW_MATCHES matches, read by walking
    created_at backwards, never by reading and sorting every match from ``enquiry_search``.

    PostgreSQL estimates several words' matches as if the words were independent ("anna
    kowalska": 1,688 of 1,000,000 expected, 16,667 found) and then reads and sorts all of them
    (300 ms) where the walk meets one every 60 rows (3 ms; docs/benchmarks.md). The vector read
    through an expression the index does not cover leaves it the walk. ``qs``: the search's
    queryset before the words (the state filter), ``references``: the reference matches listed
    above the words.
    """
    unindexed = Func(
        F("search_vector"),
        template="(%(expressions)s || ''::tsvector)",
        output_field=SearchVectorField(),
    )
    start = (page.number - 1) * page.paginator.per_page
    return (
        qs.alias(unindexed_vector=unindexed)
        .filter(unindexed_vector=search_query(q))
        .exclude(pk__in=[e.pk for e in references])
        .order_by("-created_at", "pk")[start : start + page.paginator.per_page]
    )


@require_GET
@console_view
def enquiry_list(request):
    """Find enquiries by reference (exact or its start, listed first) or by the words of their
    name, e-mail, subject and message (PostgreSQL full-text search, accents ignored, each word
    matching the start of a word); optionally by state."""
    q, notes = bounded_query(request.GET.get("q", ""))
    state = request.GET.get("state", "")
    qs = Enquiry.objects.select_related("category", "owner")
    if state in EnquiryState.values:
        qs = qs.filter(state=state)
    elif state:
        notes.append(messages.FILTER_NOT_UNDERSTOOD % {"name": "state", "value": state[:40]})
    references = []
    unsearched = qs
    if q:
        references, qs = search(qs, q)
    else:
        qs = qs.order_by("-created_at", "pk")
    page, page_notes = paginate(request, qs, SEARCH_PAGE_SIZE, cap=SEARCH_COUNT_CAP)
    if q and page.paginator.counted <= FEW_MATCHES:
        page.object_list = sorted_matches(qs, page)
    elif q:
        page.object_list = walked_matches(unsearched, q, references, page)
    # The reference matches head the first page; the word matches are paged.
    enquiries = (references if page.number == 1 else []) + list(page)
    ownership.attach_owners(enquiries)  # the owner each one's queue row names
    count = page.paginator.count + len(references)
    return render(
        request,
        "recovery/enquiry_list.html",
        {
            "page": page,
            "enquiries": enquiries,
            "references": len(references),
            "count": count,
            # "1,000+" past SEARCH_COUNT_CAP, grouped as the queue's count is
            "count_label": f"{count:,}" + ("+" if page.paginator.more else ""),
            "notes": notes + page_notes,
            "q": q,
            "state": state,
            "states": EnquiryState.choices,
        },
    )
